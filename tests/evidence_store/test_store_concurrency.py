"""Several processes appending at once, readers during writes, and a writer killed with SIGKILL."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from evidence_store.store import EvidenceStore

# argv: path, tag, batches, batch size. Prints the ids of each batch once it is committed.
WRITER = """
import sys
from evidence_store.records import EvidenceRecord, Property
from evidence_store.store import EvidenceStore

path, tag, batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = EvidenceStore(path)
print("ready", flush=True)
for b in range(batches):
    records = [
        EvidenceRecord(run_id="run", round=b % 3, outcome="violated" if i % 2 else "established",
                       property=Property(id=f"{tag}.{b}.{i}", kind=tag), context={"batch": b})
        for i in range(size)
    ]
    ids = store.append_many(records) if size > 1 else [store.append(records[0])]
    print(" ".join(map(str, ids)), flush=True)
"""


def _writer(path, tag: str, batches: int, size: int) -> subprocess.Popen[bytes]:
    """Start a writer and wait for its "ready" line.

    The pipes are unbuffered (`bufsize=0`): a raw pipe's `readline()` reads byte by byte, so
    nothing past the line is taken out of the pipe, and a later `communicate()` or `read()`
    gets every line the writer printed after it. (A buffered `readline()` may read ahead, and
    `communicate()` reads the pipe itself, past that buffer: the read-ahead lines were lost.)
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), tag, str(batches), str(size)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready", proc.stderr.read()
    return proc


def _integrity(path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


def test_several_processes_append_at_once_without_losing_or_mixing_records(tmp_path):
    path = tmp_path / "evidence.sqlite"
    EvidenceStore(path).close()
    shapes = {"w0": (60, 1), "w1": (60, 1), "w2": (12, 10), "w3": (12, 10)}
    procs = {tag: _writer(path, tag, *shape) for tag, shape in shapes.items()}
    ids_by_tag = {}
    for tag, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err.decode()
        ids_by_tag[tag] = [int(x) for x in out.split()]

    all_ids = [i for ids in ids_by_tag.values() for i in ids]
    assert len(all_ids) == len(set(all_ids)) == 60 + 60 + 120 + 120
    for tag, ids in ids_by_tag.items():
        assert ids == sorted(ids), f"{tag}: ids not increasing"
    with EvidenceStore(path) as store:
        assert store.count() == len(all_ids)
        for tag, ids in ids_by_tag.items():
            records = store.records(kind=tag)
            assert [r.record_id for r in records] == ids
            assert all(r.property.id.startswith(f"{tag}.") for r in records)
    assert _integrity(path) == "ok"


def test_readers_only_ever_see_whole_batches(tmp_path):
    path = tmp_path / "evidence.sqlite"
    reader = EvidenceStore(path)
    size = 25
    # Whether the reader gets to read while the writer is busy is up to the scheduler: on a loaded
    # machine a writer can finish first, so a run without overlap is tried again (up to five).
    for attempt in range(5):
        writer = _writer(path, f"w{attempt}", 40, size)
        seen = set()
        while writer.poll() is None:
            count = reader.count()
            latest = reader.latest()
            seen.add(count)
            assert count % size == 0
            assert len(latest) % size == 0
        assert writer.returncode == 0, writer.stderr.read()
        seen.add(reader.count())
        assert max(seen) == (attempt + 1) * 40 * size
        if len(seen) > 2:
            break
    else:
        pytest.fail("the reader never overlapped the writer in five runs")
    reader.close()


def _kill_after(path, size: int, committed_lines: int) -> list[int]:
    """Start a writer, SIGKILL it after `committed_lines` batches; return the ids it reported."""
    proc = _writer(path, "k", 10_000, size)
    assert proc.stdout is not None
    reported = []
    for _ in range(committed_lines):
        reported.extend(int(x) for x in proc.stdout.readline().split())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    reported.extend(int(x) for x in proc.stdout.read().split())  # lines flushed before the kill
    return reported


def test_a_writer_killed_mid_run_loses_at_most_the_record_it_was_writing(tmp_path):
    path = tmp_path / "evidence.sqlite"
    reported = _kill_after(path, 1, 40)
    assert _integrity(path) == "ok"
    with EvidenceStore(path) as store:
        stored = [r.record_id for r in store.records()]
        assert set(reported) <= set(stored)
        assert len(stored) - len(reported) <= 1
        # The store goes on: appends after recovery get fresh ids.
        new_id = store.append(store.get(stored[-1]).model_copy(update={"round": 9}))
        assert new_id > max(stored)


def test_a_writer_killed_mid_batch_leaves_whole_batches_only(tmp_path):
    path = tmp_path / "evidence.sqlite"
    size = 400
    proc = _writer(path, "k", 10_000, size)
    assert proc.stdout is not None
    proc.stdout.readline()  # one batch committed: the next ones are being written now
    time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _integrity(path) == "ok"
    with EvidenceStore(path) as store:
        count = store.count()
        assert count >= size and count % size == 0
        batches = {r.context["batch"] for r in store.records()}
        assert batches == set(range(count // size))


def test_threads_of_one_process_append_through_one_store_object(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from evidence_store.records import EvidenceRecord, Property

    def batch(worker: int) -> list[int]:
        records = [
            EvidenceRecord(
                run_id="run",
                round=1,
                outcome="established",
                property=Property(id=f"t{worker}.{i}", kind="jit"),
            )
            for i in range(20)
        ]
        return [i for r in records for i in store.append_many([r])]

    with EvidenceStore(tmp_path / "evidence.sqlite") as store:
        with ThreadPoolExecutor(max_workers=4) as pool:
            ids = [i for chunk in pool.map(batch, range(4)) for i in chunk]
        assert sorted(ids) == list(range(1, 81))
        assert len(store.latest()) == 80
