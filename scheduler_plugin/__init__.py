"""Hadoop plugins: what connects the agent and the placement service to stock YARN, Hive/Tez and HDFS.

- ``scripts/node_label.py``: NodeManager node-label script (``NODE_PARTITION:<class>``);
- ``scripts/topology.py`` + ``topology_map``: rack-awareness script and its mapping file;
- ``explain``: Hive ``EXPLAIN FORMATTED`` / Tez DAG description -> job JSON with task estimates;
- ``router``: job -> placement service (or local class selection) -> queue settings;
- ``hive`` + ``history``: the ``harvest hive`` beeline wrapper and its record of last runs;
- ``capacity_scheduler``: ``capacity-scheduler.xml`` with one queue and label per class;
- ``hosts_file``: upgrade domains for ``CombinedHostFileManager`` (stock-only replica spreading);
- ``java/``: the HDFS block-placement shim (``org.harvest.hdfs.HarvestBlockPlacementPolicy``).

See ``docs/hadoop.md`` and ``hadoop-conf/README.md``.
"""
