"""The report log: group commit, rotation, torn frames."""

from __future__ import annotations

import threading
from pathlib import Path

from placement_service.server.wal import ReportLog, list_segments, read_frames, segment_path


def test_group_commit_makes_every_frame_durable_in_order(tmp_path: Path) -> None:
    log = ReportLog(tmp_path, 1)
    tickets: list[int] = []
    lock = threading.Lock()

    def writer(k: int) -> None:
        for i in range(50):
            with lock:
                t = log.append(f"{k}-{i}".encode())
            log.wait(t, timeout_s=10)
            tickets.append(t)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    log.close()
    frames = [f.decode() for f in read_frames(segment_path(tmp_path, 1))]
    assert len(frames) == 400 and len(set(frames)) == 400
    for k in range(8):  # each writer's frames keep their order
        mine = [int(f.split("-")[1]) for f in frames if f.startswith(f"{k}-")]
        assert mine == sorted(mine)
    assert log.fsyncs < 400  # concurrent appends shared fsyncs


def test_rotate_closes_segment_and_new_frames_go_to_the_next(tmp_path: Path) -> None:
    landed: list[tuple[int, int, int]] = []
    log = ReportLog(tmp_path, 5, on_durable=lambda a, b, seg: landed.append((a, b, seg)))
    log.append(b"a")
    assert log.rotate() == [5]
    t2 = log.append(b"b")
    log.wait(t2, 5)
    assert landed == [(1, 1, 5), (2, 2, 6)]  # each frame reported with the segment it landed in
    log.close()
    assert [s.segment_id for s in list_segments(tmp_path)] == [5, 6]
    assert list(read_frames(segment_path(tmp_path, 5))) == [b"a"]
    assert list(read_frames(segment_path(tmp_path, 6))) == [b"b"]


def test_torn_tail_is_cut_and_earlier_frames_survive(tmp_path: Path) -> None:
    log = ReportLog(tmp_path, 1)
    t = log.append(b"first")
    t = log.append(b"second")
    log.wait(t, 5)
    log.close()
    path = segment_path(tmp_path, 1)
    whole = path.read_bytes()
    path.write_bytes(whole[:-3])  # crash in the middle of the last frame
    assert list(read_frames(path, truncate_torn=True)) == [b"first"]
    assert list(read_frames(path)) == [b"first"]
    assert path.stat().st_size == len(whole) - (8 + len(b"second"))
    # A flipped byte inside a frame fails its CRC: that frame and the rest are dropped.
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    assert list(read_frames(path)) == []


def test_future_resolves_after_durable(tmp_path: Path) -> None:
    log = ReportLog(tmp_path, 1)
    t = log.append(b"x")
    fut = log.future(t)
    fut.result(timeout=5)
    assert list(read_frames(segment_path(tmp_path, 1))) == [b"x"]
    log.close()
