"""Live reimage detection (agent/reimage.py) on a fake boot id and fake DataNode directories."""

from __future__ import annotations

import pytest

from agent.reimage import MARKER_NAME, ReimageEvent, ReimageWatch, detect


@pytest.mark.parametrize(
    ("previous", "now", "markers", "reimaged"),
    [
        (None, "b1", [False], False),  # first run: nothing to compare with
        ("b1", "b1", [False], False),  # same boot: a dir emptied while running is not a reimage
        ("b1", "b2", [True, True], False),  # plain reboot
        ("b1", "b2", [True, False], True),  # new boot, a data dir wiped
        ("b1", "b2", [], False),  # no DataNode dirs: cannot tell (report-reimage instead)
    ],
)
def test_detect(previous, now, markers, reimaged):
    assert detect(previous, now, markers) is reimaged


def _watch(tmp_path, boot_id):
    (tmp_path / "boot_id").write_text(boot_id + "\n")
    dn = tmp_path / "dn1"
    dn.mkdir(exist_ok=True)
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    return ReimageWatch("node-7", str(state), [str(dn)], boot_id_path=str(tmp_path / "boot_id")), dn


def test_reboot_is_not_a_reimage_but_a_wiped_datanode_dir_after_a_new_boot_is(tmp_path):
    w, dn = _watch(tmp_path, "boot-a")
    assert w.check_at_start(1000.0) is None  # first start arms the marker
    assert (dn / MARKER_NAME).exists()
    w, dn = _watch(tmp_path, "boot-b")
    assert w.check_at_start(2000.0) is None  # reboot: marker still there
    (dn / MARKER_NAME).unlink()  # the reimage wipes the data directory
    w, dn = _watch(tmp_path, "boot-c")
    event = w.check_at_start(3000.0)
    assert event == ReimageEvent("node-7", 3000.0, "detected")
    assert w.pending() == [event] and (dn / MARKER_NAME).exists()  # re-armed
    w, _ = _watch(tmp_path, "boot-c")
    assert w.check_at_start(3000.0) is None  # the same boot is not reported twice


def test_pending_queue_survives_until_acknowledged(tmp_path):
    w, _ = _watch(tmp_path, "boot-a")
    e1, e2 = ReimageEvent("node-7", 1.0, "declared"), ReimageEvent("node-7", 2.0, "detected")
    w.queue(e1)
    w.queue(e2)
    w.pending_path.write_text(w.pending_path.read_text() + "garbage\n")
    assert w.pending() == [e1, e2]  # a damaged line is skipped, not fatal
    w.acknowledge([e1])
    assert w.pending() == [e2]
    w.acknowledge([e2])
    assert not w.pending_path.exists()


def test_pending_is_safe_to_read_while_the_sender_acknowledges(tmp_path):
    """The agent's status page reads the queue on its own thread while the sender empties it: a read
    must see the queue before or after, never fail on the file vanishing between check and open."""
    import threading

    w, _ = _watch(tmp_path, "boot-a")
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            try:
                w.pending()
            except BaseException as exc:  # noqa: BLE001 - the failure under test
                errors.append(exc)
                return

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(400):
            e = ReimageEvent("node-7", float(i), "detected")
            w.queue(e)
            w.acknowledge([e])
    finally:
        stop.set()
        t.join()
    assert errors == []


def _declare_many(state_dir: str, n: int) -> None:
    w = ReimageWatch("node-7", state_dir, [])
    for i in range(n):
        w.queue(ReimageEvent("node-7", 1e6 + i, "declared"))


def test_no_event_is_lost_when_another_process_queues_while_the_sender_acknowledges(tmp_path):
    """``harvest agent report-reimage`` queues from its own process while the running agent's sender
    acknowledges: each rewrites the file, so without one lock between them an event is dropped."""
    import multiprocessing

    w, _ = _watch(tmp_path, "boot-a")
    n = 150
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=_declare_many, args=(str(w.state), n))
    p.start()
    acked: list[ReimageEvent] = []
    while p.is_alive() or w.pending():
        events = w.pending()
        w.acknowledge(events)
        acked.extend(events)
    p.join()
    assert p.exitcode == 0
    assert sorted(e.timestamp for e in acked) == [1e6 + i for i in range(n)]
