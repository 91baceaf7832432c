"""Generate ``capacity-scheduler.xml`` from the class table: one queue and one node label per class.

Layout (every class id is at once a YARN node label, a Capacity Scheduler queue and the
``default-node-label-expression`` of that queue)::

    root                          accessible-node-labels = every class label, 100 % of each
    ├── default                   DEFAULT partition: ``default_queue_capacity_pct``
    │                             each class label: ``default_queue_label_share_pct`` (AMs, spill-over)
    └── <class id> (one per class) DEFAULT partition: share of (100 - default) by weight
                                  own label: 100 - ``default_queue_label_share_pct``
                                  default-node-label-expression = <class id>

Capacities add up to exactly 100 per parent and per partition (the DEFAULT partition and each
label), as the Capacity Scheduler requires; shares are rounded to tenths of a percent with the
largest-remainder method so that rounding never breaks the sum.

The function is pure (strings in, XML text out) so the placement service can call it after a
re-clustering and write the file atomically before ``yarn rmadmin -refreshQueues``.

Queues of classes a re-clustering dropped (``stopped``) stay in the file with ``state = STOPPED`` and
no DEFAULT-partition share until their applications have finished: the ResourceManager refuses to
delete a queue that is not STOPPED, and then refuses the whole refresh, additions included (seen on
real 3.2.1 and 3.3.6). A STOPPED queue with running applications is DRAINING in the RM; once it is
STOPPED, the next file leaves it out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape

from placement_service import HarvestError

PREFIX = "yarn.scheduler.capacity"
DEFAULT_QUEUE = "default"
# The Capacity Scheduler's default calculator counts memory only: it places containers beyond the
# vcores the agent advertises (checked on a real 3.2.1: five 1-vcore containers on a 3-vcore node,
# each killed by the agent in turn). Harvesting needs both dimensions counted.
DOMINANT_RESOURCE_CALCULATOR = "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
_QUEUE_RE = re.compile(r"^[0-9a-z][0-9a-z-]*$")


class CapacityConfigError(HarvestError):
    """The class table cannot be turned into a valid Capacity Scheduler configuration."""


@dataclass(frozen=True)
class QueueSettings:
    """Knobs of the generated queues (percentages are 0..100)."""

    default_queue_capacity_pct: float = 20.0
    default_queue_label_share_pct: float = 10.0
    maximum_am_resource_pct: float = 20.0
    user_limit_factor: float = 2.0


def split_percent(weights: Sequence[float], total_pct: float) -> list[float]:
    """Split ``total_pct`` by ``weights`` into tenths of a percent that add up exactly.

    Largest-remainder rounding: every share is floor(total * w / sum(w)) tenths, then the leftover
    tenths go to the largest fractional parts (ties to the earlier entry).
    """
    if not weights:
        return []
    if any(w < 0 or not math.isfinite(w) for w in weights):
        raise CapacityConfigError(f"queue weights must be finite and >= 0, got {list(weights)}")
    total_tenths = round(total_pct * 10)
    weight_sum = float(sum(weights))
    if weight_sum <= 0:
        weights = [1.0] * len(weights)
        weight_sum = float(len(weights))
    exact = [total_tenths * w / weight_sum for w in weights]
    tenths = [math.floor(x) for x in exact]
    leftover = total_tenths - sum(tenths)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - tenths[i]), i))
    for i in order[:leftover]:
        tenths[i] += 1
    return [t / 10 for t in tenths]


def _fmt(pct: float) -> str:
    return f"{pct:.1f}"


def check_class_ids(class_ids: Sequence[str]) -> None:
    """Raise CapacityConfigError unless every id is a usable, unique queue and label name."""
    seen: set[str] = set()
    for i, cid in enumerate(class_ids):
        if not _QUEUE_RE.match(cid):
            raise CapacityConfigError(
                f"class id #{i} {cid!r} is not a valid queue/label name (use [0-9a-z-], starting alphanumeric)"
            )
        if cid == DEFAULT_QUEUE:
            raise CapacityConfigError(f"class id #{i} {cid!r} collides with the default queue")
        if cid in seen:
            raise CapacityConfigError(f"class id {cid!r} appears twice")
        seen.add(cid)


def queue_properties(
    class_ids: Sequence[str],
    settings: QueueSettings = QueueSettings(),
    weights: Mapping[str, float] | None = None,
    stopped: Sequence[str] = (),
) -> list[tuple[str, str, str]]:
    """The (name, value, description) properties of the queue tree, in a stable order.

    ``stopped``: queues of dropped classes, kept (``STOPPED``, 0 % of the DEFAULT partition, their
    label's share as before) until the RM has drained them."""
    ids = sorted(class_ids)
    stopped_ids = sorted(set(stopped) - set(ids))
    check_class_ids([*ids, *stopped_ids])
    for name, pct in (
        ("default_queue_capacity_pct", settings.default_queue_capacity_pct),
        ("default_queue_label_share_pct", settings.default_queue_label_share_pct),
        ("maximum_am_resource_pct", settings.maximum_am_resource_pct),
    ):
        if not 0 <= pct <= 100:
            raise CapacityConfigError(f"{name} must be within 0..100, got {pct}")
    # Work in tenths of a percent so that every sum is exact.
    default_pct = round(settings.default_queue_capacity_pct, 1) if ids else 100.0
    class_weights = [float((weights or {}).get(cid, 1.0)) for cid in ids]
    class_default_pcts = split_percent(class_weights, 100.0 - default_pct)
    default_label_pct = round(settings.default_queue_label_share_pct, 1)
    class_label_pct = (1000 - round(default_label_pct * 10)) / 10
    all_ids = sorted([*ids, *stopped_ids])
    labels = ",".join(all_ids) if all_ids else " "

    props: list[tuple[str, str, str]] = [
        (f"{PREFIX}.resource-calculator", DOMINANT_RESOURCE_CALCULATOR,
         "Count vcores as well as memory, so the scheduler keeps to the vcores the harvest agent "
         "advertises (the default calculator counts memory only)."),
        (f"{PREFIX}.maximum-am-resource-percent", f"{settings.maximum_am_resource_pct / 100:.2f}",
         "Share of a queue's resources that ApplicationMasters may hold."),
        (f"{PREFIX}.root.queues", ",".join([DEFAULT_QUEUE, *all_ids]),
         "One queue per utilization class plus the default queue (and dropped classes' queues until "
         "they are drained)."),
        (f"{PREFIX}.root.accessible-node-labels", labels,
         "The root queue may use every class partition."),
    ]
    for cid in all_ids:
        props.append((f"{PREFIX}.root.accessible-node-labels.{cid}.capacity", "100.0",
                      f"Root owns all of partition {cid}."))
    props += [
        (f"{PREFIX}.root.{DEFAULT_QUEUE}.capacity", _fmt(default_pct),
         "DEFAULT (unlabelled) partition share of the default queue."),
        (f"{PREFIX}.root.{DEFAULT_QUEUE}.maximum-capacity", "100.0",
         "The default queue may grow into idle DEFAULT-partition capacity."),
        (f"{PREFIX}.root.{DEFAULT_QUEUE}.accessible-node-labels", labels,
         "The default queue may use idle capacity of every class partition (non-exclusive labels) "
         "and place ApplicationMasters there."),
        (f"{PREFIX}.root.{DEFAULT_QUEUE}.state", "RUNNING", "Accept applications."),
        (f"{PREFIX}.root.{DEFAULT_QUEUE}.user-limit-factor", f"{settings.user_limit_factor:g}",
         "One user may exceed the queue's guarantee by this factor."),
    ]
    for cid in all_ids:
        props.append((f"{PREFIX}.root.{DEFAULT_QUEUE}.accessible-node-labels.{cid}.capacity",
                      _fmt(default_label_pct), f"Share of partition {cid} kept for the default queue."))
    shares = dict(zip(ids, class_default_pcts, strict=True))
    for cid in all_ids:
        running = cid in shares
        default_share = shares.get(cid, 0.0)
        q = f"{PREFIX}.root.{cid}"
        props += [
            (f"{q}.capacity", _fmt(default_share),
             f"DEFAULT-partition share of class queue {cid} (its ApplicationMasters may run there)."),
            (f"{q}.maximum-capacity", "100.0", "Grow into idle DEFAULT-partition capacity."),
            (f"{q}.accessible-node-labels", cid, f"Queue {cid} runs on partition {cid} only."),
            (f"{q}.accessible-node-labels.{cid}.capacity", _fmt(class_label_pct),
             f"Guaranteed share of partition {cid}."),
            (f"{q}.accessible-node-labels.{cid}.maximum-capacity", "100.0",
             f"May use all of partition {cid} when it is idle."),
            (f"{q}.default-node-label-expression", cid,
             f"Containers of jobs routed here (tez.queue.name={cid}) ask for label {cid}."),
            (f"{q}.state", "RUNNING" if running else "STOPPED",
             "Accept applications." if running else
             "Class dropped by a re-clustering: no new applications; removed once its running ones "
             "have finished (the RM refuses to delete a queue that is not STOPPED)."),
            (f"{q}.user-limit-factor", f"{settings.user_limit_factor:g}",
             "One user may exceed the queue's guarantee by this factor."),
        ]
    return props


def render_capacity_scheduler(
    class_ids: Sequence[str],
    settings: QueueSettings = QueueSettings(),
    weights: Mapping[str, float] | None = None,
    source: str = "",
    stopped: Sequence[str] = (),
) -> str:
    """``capacity-scheduler.xml`` text for ``class_ids`` (see the module docstring for the layout).

    ``weights`` (class id -> weight, e.g. servers or cores) splits the DEFAULT-partition share among
    class queues; missing classes weigh 1. ``stopped``: dropped classes' queues, kept STOPPED until
    drained. Raises CapacityConfigError for unusable ids or settings.
    """
    props = queue_properties(class_ids, settings, weights, stopped)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        "<!-- Generated by 'harvest capacity-scheduler'"
        + (f" from {escape(source).replace('--', '- -')}" if source else "")
        + "; do not edit by hand: re-run it after re-clustering, then 'yarn rmadmin -refreshQueues'. -->",
        "<configuration>",
    ]
    for name, value, description in props:
        lines += [
            "  <property>",
            f"    <name>{escape(name)}</name>",
            f"    <value>{escape(value)}</value>",
            f"    <description>{escape(description)}</description>",
            "  </property>",
        ]
    lines.append("</configuration>")
    return "\n".join(lines) + "\n"


def add_labels_command(class_ids: Sequence[str], exclusive: bool = False) -> str:
    """The ``yarn rmadmin`` command that creates the class labels (labels must exist before use)."""
    ids = sorted(class_ids)
    check_class_ids(ids)
    flag = "true" if exclusive else "false"
    return 'yarn rmadmin -addToClusterNodeLabels "' + ",".join(f"{c}(exclusive={flag})" for c in ids) + '"'


def read_queue_states(text: str) -> dict[str, str]:
    """The root's child queues of a ``capacity-scheduler.xml`` and their configured state
    (``RUNNING`` unless the file says otherwise). Raises CapacityConfigError for unreadable XML."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise CapacityConfigError(f"capacity-scheduler.xml is not readable XML: {exc}") from None
    props = {(p.findtext("name") or "").strip(): (p.findtext("value") or "").strip() for p in root.iter("property")}
    names = [q.strip() for q in props.get(f"{PREFIX}.root.queues", "").split(",") if q.strip()]
    return {q: props.get(f"{PREFIX}.root.{q}.state", "RUNNING").upper() for q in names}
