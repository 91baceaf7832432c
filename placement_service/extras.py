"""Install profiles: which optional extra brings which third-party package.

The base install (``pip install harvest``) is what every node needs: the agent, its CLI, the
NodeManager label script and the topology script (numpy, psutil, grpcio, protobuf). The placement
service, the capacity solvers and the simulator need extras (``harvest[service]``,
``harvest[capacity]``, ``harvest[sim]``, or ``harvest[all]``). Their packages call
:func:`require_extra` on import, and the ``harvest`` command turns a missing package into one line
naming the extra to install instead of a traceback.
"""

from __future__ import annotations

import importlib.util

from placement_service import HarvestError

# Top-level import name -> the extra that brings it (the first of several that do).
EXTRA_OF_MODULE: dict[str, str] = {
    "flask": "service",
    "werkzeug": "service",
    "cheroot": "service",
    "sklearn": "service",
    "hdfs": "service",
    "pyarrow": "service",
    "scipy": "service",
    "highspy": "capacity",
    "distributed": "capacity",
    "dask": "capacity",
    "matplotlib": "sim",
}

# Extra -> the import names a package that needs the extra checks for.
MODULES_OF_EXTRA: dict[str, tuple[str, ...]] = {
    "service": ("flask", "cheroot", "sklearn", "scipy", "pyarrow", "hdfs"),
    "capacity": ("flask", "cheroot", "scipy", "pyarrow", "highspy", "distributed"),
    "sim": ("scipy", "sklearn", "pyarrow", "matplotlib"),
}


class MissingExtraError(HarvestError, ImportError):
    """A part of the project was used whose optional dependencies are not installed."""


def install_hint(extra: str) -> str:
    return f"pip install 'harvest[{extra}]' (or 'harvest[all]')"


def require_extra(extra: str, part: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` if any package it brings is missing.

    Uses ``importlib.util.find_spec`` only: nothing is imported, so the check costs microseconds.
    """
    missing = [name for name in MODULES_OF_EXTRA[extra] if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"{part} needs the optional dependencies of the '{extra}' extra (missing: "
            f"{', '.join(missing)}): {install_hint(extra)}"
        )


def missing_module_message(exc: ModuleNotFoundError) -> str | None:
    """One line for a missing third-party package that an extra brings, or None for anything else."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"this command needs the Python package '{top}' from the '{extra}' extra: {install_hint(extra)}"
