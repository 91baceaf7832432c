from __future__ import annotations

import json

import pytest

from placement_service.capacity.ras import CapacityError, io
from placement_service.capacity.ras.domain import Method

HEADER = "server,hardware,datacenter,msb,rack,available,in_use\n"


def _write(tmp_path, text, name="inv.csv"):  # type: ignore[no-untyped-def]
    p = tmp_path / name
    p.write_text(text)
    return p


def test_reads_csv_and_parquet_round_trip(tmp_path, small_region):
    for name in ("inv.csv", "inv.parquet"):
        io.write_table(tmp_path / name, io.region_columns(small_region))
        back = io.read_inventory(tmp_path / name)
        assert back.server == small_region.server
        assert (back.available == small_region.available).all()
        assert [back.msb_names[m] for m in back.msb] == [small_region.msb_names[m] for m in small_region.msb]


def test_missing_column_is_named(tmp_path):
    p = _write(tmp_path, "server,hardware\ns1,h\n")
    with pytest.raises(CapacityError, match="missing column.*datacenter"):
        io.read_inventory(p)


def test_bad_flag_names_row_and_column(tmp_path):
    p = _write(tmp_path, HEADER + "s1,h,d,m,r,true,false\ns2,h,d,m,r,maybe,false\n")
    with pytest.raises(CapacityError, match=r"row 3: column 'available'.*maybe"):
        io.read_inventory(p)


def test_duplicate_server_and_msb_in_two_datacenters(tmp_path):
    p = _write(tmp_path, HEADER + "s1,h,d,m,r,1,0\ns1,h,d,m,r,1,0\n")
    with pytest.raises(CapacityError, match="'s1' repeats row 2"):
        io.read_inventory(p)
    p = _write(tmp_path, HEADER + "s1,h,d1,m,r,1,0\ns2,h,d2,m,r,1,0\n")
    with pytest.raises(CapacityError, match="MSB 'm' is in datacenter 'd1'"):
        io.read_inventory(p)


@pytest.mark.parametrize(
    ("doc", "pattern"),
    [
        ({"nope": []}, "'reservations' list"),
        ({"reservations": [{"id": "a", "capacity_rru": -1, "rru": {"h": 1}}]}, "capacity_rru.*>= 0"),
        ({"reservations": [{"id": "a", "capacity_rru": 1, "rru": {}}]}, "'rru' must be"),
        ({"reservations": [{"id": "a", "capacity_rru": 1, "rru": {"h": 1}}] * 2}, "used twice"),
        ({"reservations": [], "settings": {"bogus": 1}}, "unknown setting"),
        ({"reservations": [], "settings": {"random_failure_buffer": 3}}, "within 0..1"),
    ],
)
def test_reservation_errors_name_the_field(tmp_path, doc, pattern):
    p = tmp_path / "R.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(CapacityError, match=pattern):
        io.read_requests(p)


def test_settings_parse_with_defaults(tmp_path):
    p = tmp_path / "R.json"
    p.write_text(json.dumps({"reservations": [{"id": "a", "capacity_rru": 3, "rru": {"h": 1}}],
                             "settings": {"method": "greedy", "move_cost_in_use": 20}}))  # fmt: skip
    reqs, st = io.read_requests(p)
    assert st.method is Method.GREEDY and st.move_cost_in_use == 20.0 and st.random_failure_buffer == 0.02
    assert reqs[0].rru == {"h": 1.0}


def test_duplicate_json_key_is_rejected(tmp_path):
    p = tmp_path / "A.json"
    p.write_text('{"assignment": {"s1": "a", "s1": "b"}}')
    with pytest.raises(CapacityError, match="twice"):
        io.read_assignment(p)


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    target = tmp_path / "out.json"
    io.write_json(target, {"v": 1})

    def boom(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        io.atomic_write(target, boom)
    assert json.loads(target.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
