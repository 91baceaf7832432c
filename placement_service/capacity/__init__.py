"""See the package docstring of placement_service."""
