"""Trace files: validation errors name file, row and column; round trips; atomic writes."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_service import HarvestError
from placement_service.core.types import Inventory, ReimageEvents
from placement_service.traces import io
from placement_service.traces.io import TraceError, UtilizationSamples

HEADER = "timestamp,server,tenant,cpu\n"


def write(path: Path, text: str) -> Path:
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as fh:
            fh.write(text)
    else:
        path.write_text(text)
    return path


# (case, file body, kwargs, expected row, expected column, words in the message)
UTILIZATION_ERRORS = [
    ("missing column", "timestamp,server,tenant\n0,s1,t1\n", {}, None, None, ["missing column", "'cpu'"]),
    ("cpu above 1", HEADER + "0,s1,t1,0.5\n120,s1,t1,1.7\n", {}, 2, "cpu", ["[0, 1]", "1.7", "--cpu-percent"]),
    ("cpu negative", HEADER + "0,s1,t1,-0.1\n", {}, 1, "cpu", ["[0, 1]", "-0.1"]),
    ("percent above 100", HEADER + "0,s1,t1,50\n120,s1,t1,130\n", {"cpu_percent": True}, 2, "cpu", ["[0, 100]"]),
    ("not a number", HEADER + "0,s1,t1,0.5\n120,s1,t1,abc\n240,s1,t1,0.2\n", {}, 2, "cpu", ["'abc'"]),
    ("NaN", HEADER + "0,s1,t1,0.5\n120,s1,t1,NaN\n", {}, 2, "cpu", ["expected a number"]),
    ("empty cpu", HEADER + "0,s1,t1,0.5\n120,s1,t1,\n", {}, 2, "cpu", ["empty"]),
    ("bad time", HEADER + "0,s1,t1,0.5\nyesterday,s1,t1,0.5\n", {}, 2, "timestamp", ["ISO 8601", "'yesterday'"]),
    ("bad ISO time", HEADER + "2017-01-01T00:00:00,s1,t1,0.5\n2017-13-01T00:02:00,s1,t1,0.5\n", {}, 2,
     "timestamp", ["'2017-13-01T00:02:00'"]),
    ("duplicate", HEADER + "0,s1,t1,0.5\n0,s2,t1,0.5\n120,s1,t1,0.5\n0,s1,t1,0.4\n", {}, 4, "server",
     ["duplicate", "'s1'", "row 1"]),
    ("unknown server", HEADER + "0,s1,t1,0.5\n0,s9,t1,0.5\n", {"known_servers": ["s1", "s2"]}, 2, "server",
     ["unknown server 's9'"]),
    ("empty server", HEADER + "0,s1,t1,0.5\n0,,t1,0.5\n", {}, 2, "server", ["non-empty"]),
    ("two tenants", HEADER + "0,s1,t1,0.5\n120,s1,t2,0.5\n", {}, 2, "tenant", ["'t2'", "'t1'", "row 1"]),
    ("milliseconds", HEADER + "1456790400000,s1,t1,0.5\n", {}, 1, "timestamp", ["milliseconds"]),
    ("memory above 1", "timestamp,server,tenant,cpu,memory\n0,s1,t1,0.5,3\n", {}, 1, "memory", ["[0, 1]"]),
]


@pytest.mark.parametrize(
    "case,body,kwargs,row,column,words", UTILIZATION_ERRORS, ids=[c[0] for c in UTILIZATION_ERRORS]
)
@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_utilization_errors_name_file_row_and_column(tmp_path, case, body, kwargs, row, column, words, suffix):
    path = write(tmp_path / f"utilization{suffix}", body)
    with pytest.raises(TraceError) as info:
        io.load_utilization(path, **kwargs)
    err = info.value
    assert isinstance(err, HarvestError)
    assert (err.row, err.column) == (row, column)
    assert str(err).startswith(str(path))
    if row is not None:
        assert f"row {row}, column {column!r}" in str(err)
    for w in words:
        assert w in str(err)


def test_parquet_errors_name_row_and_column(tmp_path):
    path = tmp_path / "u.parquet"
    pq.write_table(
        pa.table({"timestamp": [0, 120, 240], "server": ["a", "a", "a"], "tenant": ["t"] * 3, "cpu": [0.1, 0.2, 2.0]}),
        path,
    )
    with pytest.raises(TraceError) as info:
        io.load_utilization(path)
    assert (info.value.row, info.value.column) == (3, "cpu")
    pq.write_table(
        pa.table({"timestamp": [0, 120], "server": ["a", "a"], "tenant": ["t"] * 2, "cpu": ["0.1", "x"]}), path
    )
    with pytest.raises(TraceError, match="row 2, column 'cpu'.*'x'"):
        io.load_utilization(path)


def test_bad_value_deep_in_a_large_csv_is_found(tmp_path):
    # Pyarrow infers types from the first block; a word far down must still be named exactly.
    n = 300_000
    lines = [f"{i * 120},s{i % 7},t{i % 7 % 3},0.25" for i in range(n)]
    lines[n - 5] = f"{(n - 5) * 120},s1,t1,oops"
    path = write(tmp_path / "big.csv", HEADER + "\n".join(lines) + "\n")
    with pytest.raises(TraceError) as info:
        io.load_utilization(path)
    assert (info.value.row, info.value.column) == (n - 4, "cpu")


def test_cpu_percent_is_scaled(tmp_path):
    path = write(tmp_path / "u.csv", HEADER + "0,s1,t1,50\n120,s1,t1,100\n240,s1,t1,0\n")
    s = io.load_utilization(path, cpu_percent=True)
    np.testing.assert_allclose(s.cpu, [0.5, 1.0, 0.0])


def test_iso_and_epoch_timestamps_agree(tmp_path):
    iso = write(
        tmp_path / "iso.csv",
        HEADER + "2016-03-01T00:00:00Z,s1,t1,0.1\n2016-03-01 00:02:00,s1,t1,0.2\n"
        "2016-03-01T01:04:00+01:00,s1,t1,0.3\n2016-03-01T00:06:00.000,s1,t1,0.4\n"
        "2016-03-01t00:08:00.000000000z,s1,t1,0.4\n2016-03-01T01:10:00+0100,s1,t1,0.4\n",
    )
    epoch = write(
        tmp_path / "epoch.csv",
        HEADER + "1456790400,s1,t1,0.1\n1456790520,s1,t1,0.2\n1456790640.0,s1,t1,0.3\n1456790760,s1,t1,0.4\n"
        "1456790880,s1,t1,0.4\n1.45679100e9,s1,t1,0.4\n",
    )
    a, b = io.load_utilization(iso), io.load_utilization(epoch)
    np.testing.assert_array_equal(a.timestamp_s, b.timestamp_s)
    np.testing.assert_array_equal(a.timestamp_s, 1456790400 + np.arange(6) * 120.0)


def test_parquet_timestamp_type_is_accepted(tmp_path):
    path = tmp_path / "u.parquet"
    ts = pa.array([1456790400_000, 1456790520_000], type=pa.timestamp("ms", tz="UTC"))
    pq.write_table(pa.table({"timestamp": ts, "server": ["a", "a"], "tenant": ["t", "t"], "cpu": [0.1, 0.2]}), path)
    np.testing.assert_array_equal(io.load_utilization(path).timestamp_s, [1456790400.0, 1456790520.0])


def _samples() -> UtilizationSamples:
    rng = np.random.default_rng(0)
    n = 50
    return UtilizationSamples(
        timestamp_s=np.tile(1456790400.0 + 120.0 * np.arange(n // 2), 2),
        server=np.repeat(np.array(["srv-1", "srv-2"], dtype=object), n // 2),
        tenant=np.repeat(np.array(["web", "db"], dtype=object), n // 2),
        cpu=np.round(rng.random(n), 4),
        memory=np.round(rng.random(n), 4),
        environment=np.repeat(np.array(["prod-1", "prod-1"], dtype=object), n // 2),
    )


@pytest.mark.parametrize("name", ["u.parquet", "u.csv", "u.csv.gz", "u.pq"])
def test_utilization_round_trip(tmp_path, name):
    s = _samples()
    io.write_utilization(s, tmp_path / name)
    back = io.load_utilization(tmp_path / name)
    np.testing.assert_array_equal(back.timestamp_s, s.timestamp_s)
    np.testing.assert_array_equal(back.server, s.server)
    np.testing.assert_array_equal(back.tenant, s.tenant)
    np.testing.assert_array_equal(back.environment, s.environment)
    np.testing.assert_allclose(back.cpu, s.cpu)
    np.testing.assert_allclose(back.memory, s.memory)
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left


def _inventory() -> Inventory:
    return Inventory(
        server=("s1", "s2", "s3"),
        tenant=("t1", "t1", "t2"),
        environment=("prod-1", "prod-1", "dev-1"),
        rack=("r1", "r1", "r2"),
        cores=np.array([16.0, 16.0, 32.0]),
        memory_mb=np.array([65536.0, 65536.0, 131072.0]),
        storage_gb=np.array([1000.0, 0.0, 2500.5]),
        hardware=("a", "a", "b"),
        datacenter=("dc-1",) * 3,
        msb=("m1", "m1", "m2"),
    )


@pytest.mark.parametrize("name", ["inventory.parquet", "inventory.csv"])
def test_inventory_round_trip(tmp_path, name):
    inv = _inventory()
    io.write_inventory(inv, tmp_path / name)
    back = io.load_inventory(tmp_path / name)
    for f in ("server", "tenant", "environment", "rack", "hardware", "datacenter", "msb"):
        assert getattr(back, f) == getattr(inv, f)
    for f in ("cores", "memory_mb", "storage_gb"):
        np.testing.assert_allclose(getattr(back, f), getattr(inv, f))


def test_inventory_optional_columns_may_be_absent(tmp_path):
    path = write(
        tmp_path / "inv.csv", "server,tenant,environment,rack,cores,memory_mb,storage_gb\ns1,t,e,r,8,1024,10\n"
    )
    inv = io.load_inventory(path)
    assert inv.server == ("s1",) and inv.hardware == () and inv.msb == ()


INVENTORY_HEADER = "server,tenant,environment,rack,cores,memory_mb,storage_gb\n"
INVENTORY_ERRORS = [
    ("duplicate server", INVENTORY_HEADER + "s1,t,e,r,8,1024,10\ns2,t,e,r,8,1024,10\ns1,t,e,r,8,1024,10\n", 3,
     "server", "row 1"),
    ("negative storage", INVENTORY_HEADER + "s1,t,e,r,8,1024,-1\n", 1, "storage_gb", "non-negative"),
    ("word for cores", INVENTORY_HEADER + "s1,t,e,r,8,1024,1\ns2,t,e,r,many,1024,1\n", 2, "cores", "'many'"),
    ("missing tenant", "server,environment,rack,cores,memory_mb,storage_gb\ns1,e,r,8,1024,1\n", None, None, "'tenant'"),
]


@pytest.mark.parametrize("case,body,row,column,word", INVENTORY_ERRORS, ids=[c[0] for c in INVENTORY_ERRORS])
def test_inventory_errors(tmp_path, case, body, row, column, word):
    path = write(tmp_path / "inventory.csv", body)
    with pytest.raises(TraceError) as info:
        io.load_inventory(path)
    assert (info.value.row, info.value.column) == (row, column)
    assert word in str(info.value)


def test_reimages_round_trip_sorted_and_validated(tmp_path):
    path = write(tmp_path / "reimages.csv", "timestamp,server\n300,s2\n2016-03-01T00:00:00Z,s1\n100,s1\n")
    ev = io.load_reimages(path, known_servers=["s1", "s2"])
    assert ev.server == ("s1", "s2", "s1")
    np.testing.assert_array_equal(ev.timestamp_s, [100.0, 300.0, 1456790400.0])
    io.write_reimages(ev, tmp_path / "r.parquet")
    back = io.load_reimages(tmp_path / "r.parquet")
    assert back.server == ev.server
    with pytest.raises(TraceError, match="row 1, column 'server'.*unknown server 's2'"):
        io.load_reimages(path, known_servers=["s1"])
    dup = write(tmp_path / "dup.csv", "timestamp,server\n300,s2\n300,s2\n")
    with pytest.raises(TraceError, match="row 2, column 'server': duplicate"):
        io.load_reimages(dup)


def test_unknown_extension_and_missing_file(tmp_path):
    with pytest.raises(TraceError, match="unknown file type"):
        io.load_utilization(tmp_path / "u.json")
    with pytest.raises(TraceError, match="no such file"):
        io.load_utilization(tmp_path / "u.csv")


def test_failed_write_leaves_the_old_file_untouched(tmp_path):
    target = tmp_path / "reimages.parquet"
    io.write_reimages(ReimageEvents(np.array([1.0]), ("s1",)), target)
    before = target.read_bytes()
    bad = ReimageEvents(np.array([1.0, 2.0]), ("s1",))  # columns of different lengths: the write fails
    with pytest.raises((ValueError, pa.ArrowException)):
        io.write_reimages(bad, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reimages.parquet"]


def test_write_tables_is_all_or_nothing(tmp_path):
    good = pa.table({"timestamp": [1], "server": ["s"]})
    with pytest.raises(TraceError):
        io.write_tables([(good, tmp_path / "a.parquet"), (good, tmp_path / "b.txt")])
    assert list(tmp_path.iterdir()) == []


def test_factorize_is_sorted_and_cached():
    s = UtilizationSamples(
        timestamp_s=np.array([0.0, 0.0, 120.0]),
        server=np.array(["b", "a", "b"]),
        tenant=np.array(["t", "t", "t"]),
        cpu=np.array([0.1, 0.2, 0.3]),
    )
    names, codes = s.factorize("server")
    assert names.tolist() == ["a", "b"] and codes.tolist() == [1, 0, 1]
    assert s.factorize("server") is s.factorize("server")


def test_empty_files(tmp_path):
    with pytest.raises(TraceError, match="no samples"):
        io.load_utilization(write(tmp_path / "u.csv", HEADER))
    with pytest.raises(TraceError, match="no servers"):
        io.load_inventory(write(tmp_path / "i.csv", INVENTORY_HEADER))
    assert io.load_reimages(write(tmp_path / "r.csv", "timestamp,server\n")).server == ()


names = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12
).filter(lambda s: s.strip() == s and s.strip() != "")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    server_names=st.lists(names, min_size=1, max_size=5, unique=True),
    cpu=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=20),
    suffix=st.sampled_from([".csv", ".csv.gz", ".parquet"]),
)
def test_round_trip_keeps_any_names_and_values(tmp_path, server_names, cpu, suffix):
    # Names with commas, quotes, digits only ("007"), non-ASCII... survive a write and a read.
    n = len(cpu)
    server = np.array([server_names[i % len(server_names)] for i in range(n)], dtype=object)
    s = UtilizationSamples(
        timestamp_s=np.arange(n, dtype=np.float64) * 60.0,
        server=server,
        tenant=np.array(["t-" + str(x) for x in server], dtype=object),
        cpu=np.asarray(cpu, dtype=np.float64),
    )
    path = tmp_path / f"u{suffix}"
    io.write_utilization(s, path)
    back = io.load_utilization(path, known_servers=server_names)
    assert back.server.tolist() == server.tolist()
    assert back.tenant.tolist() == s.tenant.tolist()
    np.testing.assert_array_equal(back.cpu, s.cpu)


def test_names_that_look_like_nulls_stay_names_even_on_the_fallback_path(tmp_path):
    # A word deep in a numeric column sends the CSV reader to its all-text fallback; server names
    # such as "NA" or "null" must still be names there, and an empty cpu cell an error.
    rows = [f"{i * 60},{'NA' if i % 2 else 'null'},t,0.5" for i in range(200_000)]
    path = write(tmp_path / "u.csv", HEADER + "\n".join(rows) + "\n")
    assert sorted(io.load_utilization(path).factorize("server")[0].tolist()) == ["NA", "null"]
    rows[150_000] = "9000000,NA,t,"
    rows[180_000] = "9000060,NA,t,x"
    path = write(tmp_path / "v.csv", HEADER + "\n".join(rows) + "\n")
    with pytest.raises(TraceError, match="row 150001, column 'cpu': expected a number in \\[0, 1\\], got an empty"):
        io.load_utilization(path)


def test_ragged_csv_row_is_reported_with_its_text(tmp_path):
    path = write(tmp_path / "u.csv", HEADER + "0,s1,t1,0.5\n120,s1,t1\n")
    with pytest.raises(TraceError, match="cannot read the csv file: .*Expected 4 columns, got 3: 120,s1,t1"):
        io.load_utilization(path)


def test_duplicate_message_shows_the_time_readably(tmp_path):
    path = write(tmp_path / "u.csv", HEADER + "1456790400,s1,t1,0.5\n1456790400,s1,t1,0.4\n")
    with pytest.raises(TraceError, match=r"at 2016-03-01T00:00:00Z \(1456790400\) already appears in row 1"):
        io.load_utilization(path)


def test_sub_second_times_keep_their_fraction(tmp_path):
    path = write(tmp_path / "u.csv", HEADER + "2016-03-01T00:00:00.123456789Z,s1,t1,0.1\n2016-03-01T00:02:00.5,s1,t1,0.1\n")
    np.testing.assert_allclose(io.load_utilization(path).timestamp_s, [1456790400.123456789, 1456790520.5])


def test_inventory_tenants_must_match(tmp_path):
    inv = _inventory()  # s1, s2 in t1; s3 in t2
    good = write(tmp_path / "u.csv", HEADER + "0,s1,t1,0.5\n0,s3,t2,0.5\n")
    assert len(io.load_utilization(good, inventory=inv)) == 2
    bad = write(tmp_path / "v.csv", HEADER + "0,s1,t1,0.5\n0,s2,t2,0.5\n")
    with pytest.raises(TraceError, match="row 2, column 'tenant': server 's2' is in tenant 't2' here but in tenant 't1'"):
        io.load_utilization(bad, inventory=inv)
    unknown = write(tmp_path / "w.csv", HEADER + "0,s9,t1,0.5\n")
    with pytest.raises(TraceError, match="unknown server 's9'"):
        io.load_utilization(unknown, inventory=inv)


def test_optional_columns_can_be_skipped_without_changing_the_series(tmp_path: Path) -> None:
    from placement_service.traces.series import tenant_series

    s = _samples()
    path = tmp_path / "u.parquet"
    io.write_utilization(s, path)
    full = io.load_utilization(path)
    lean = io.load_utilization(path, optional_columns=False)
    assert full.memory is not None and full.environment is not None
    assert lean.memory is None and lean.environment is None
    np.testing.assert_array_equal(lean.cpu, full.cpu)
    a, b = tenant_series(full), tenant_series(lean)
    assert a.tenants == b.tenants and a.start_s == b.start_s and a.interval_s == b.interval_s
    np.testing.assert_array_equal(a.cpu, b.cpu)
