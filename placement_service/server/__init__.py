"""See the package docstring of placement_service."""

from placement_service.extras import require_extra

require_extra("service", "the placement service (placement_service.server)")
