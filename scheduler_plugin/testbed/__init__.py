"""A real Hadoop cluster on one machine for the integration tier (see cluster.py)."""
