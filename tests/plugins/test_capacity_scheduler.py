"""Generated capacity-scheduler.xml parses and its capacities add up per parent and partition."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_plugin.capacity_scheduler import (
    CapacityConfigError,
    QueueSettings,
    add_labels_command,
    render_capacity_scheduler,
    split_percent,
)

P = "yarn.scheduler.capacity."


def parse(xml: str) -> dict[str, str]:
    root = ET.fromstring(xml)
    assert root.tag == "configuration"
    props: dict[str, str] = {}
    for prop in root.findall("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        assert name and value is not None and name not in props
        props[name] = value
    return props


def check_tree(props: dict[str, str], class_ids: list[str]) -> None:
    """Every parent's children add up to 100 in the DEFAULT partition and in every label they list."""
    children = props[P + "root.queues"].split(",")
    assert sorted(children) == sorted(["default", *class_ids])
    assert abs(sum(float(props[f"{P}root.{q}.capacity"]) for q in children) - 100.0) < 1e-9
    root_labels = [x for x in props[P + "root.accessible-node-labels"].split(",") if x.strip()]
    assert sorted(root_labels) == sorted(class_ids)
    per_label: dict[str, float] = defaultdict(float)
    for q in children:
        for label in [x for x in props[f"{P}root.{q}.accessible-node-labels"].split(",") if x.strip()]:
            assert label in root_labels, f"queue {q} lists label {label} that root cannot access"
            per_label[label] += float(props[f"{P}root.{q}.accessible-node-labels.{label}.capacity"])
    for label in root_labels:
        assert float(props[f"{P}root.accessible-node-labels.{label}.capacity"]) == 100.0
        assert abs(per_label[label] - 100.0) < 1e-9, (label, per_label[label])
    for cid in class_ids:
        assert props[f"{P}root.{cid}.default-node-label-expression"] == cid
        assert props[f"{P}root.{cid}.accessible-node-labels"] == cid


def test_three_classes_layout() -> None:
    ids = ["unpredictable-0", "constant-0", "periodic-1"]
    props = parse(render_capacity_scheduler(ids, QueueSettings(default_queue_capacity_pct=25.0)))
    check_tree(props, ids)
    assert props[P + "root.default.capacity"] == "25.0"
    assert props[P + "root.constant-0.capacity"] == "25.0"
    assert props[P + "root.constant-0.accessible-node-labels.constant-0.capacity"] == "90.0"
    assert props[P + "root.default.accessible-node-labels.constant-0.capacity"] == "10.0"


ids_strategy = st.lists(st.from_regex(r"(periodic|constant|unpredictable)-[0-9]{1,2}", fullmatch=True),
                        min_size=0, max_size=25, unique=True)


@settings(max_examples=150, deadline=None)
@given(
    ids=ids_strategy,
    default_pct=st.floats(0, 100),
    label_share=st.floats(0, 100),
    weights=st.lists(st.floats(0, 1000), min_size=25, max_size=25),
)
def test_capacities_sum_to_100_for_many_class_tables(
    ids: list[str], default_pct: float, label_share: float, weights: list[float]
) -> None:
    w = dict(zip(ids, weights, strict=False))
    xml = render_capacity_scheduler(ids, QueueSettings(default_pct, label_share), w)
    check_tree(parse(xml), ids)


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=40), st.floats(0, 100))
def test_split_percent_is_exact_in_tenths(weights: list[float], total: float) -> None:
    parts = split_percent(weights, total)
    assert round(sum(p * 10 for p in parts)) == round(total * 10)
    assert all(p >= 0 for p in parts)


@pytest.mark.parametrize("ids, match", [(["Bad_Label"], "not a valid"), (["default"], "collides"),
                                        (["a-1", "a-1"], "twice"), (["x.y"], "not a valid")])
def test_bad_class_ids_are_rejected_with_the_id(ids: list[str], match: str) -> None:
    with pytest.raises(CapacityConfigError, match=match):
        render_capacity_scheduler(ids)


def test_bad_percentages_rejected() -> None:
    with pytest.raises(CapacityConfigError, match="default_queue_capacity_pct"):
        render_capacity_scheduler(["a-1"], QueueSettings(default_queue_capacity_pct=120))


def test_add_labels_command_lists_every_class_non_exclusive() -> None:
    cmd = add_labels_command(["b-1", "a-2"])
    assert cmd == 'yarn rmadmin -addToClusterNodeLabels "a-2(exclusive=false),b-1(exclusive=false)"'


def test_dominant_resource_calculator_is_set_contract() -> None:
    # Contract (issue 12): the memory-only default calculator lets the scheduler place containers
    # beyond the vcores the agent advertises, and the agent then kills them in a loop.
    props = parse(render_capacity_scheduler(["constant-0"]))
    assert props[P + "resource-calculator"] == "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"
