"""Results store: append-only, durable per record, concurrent writers, queries, schema version."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.store import SCHEMA_VERSION
from harness.store import Record
from harness.store import ResultsStore
from harness.store import StoreError

REPO = Path(__file__).resolve().parents[2]


def _rec(op="rmsnorm", variant="v0", device="h100", shape=(4096, 4096), dtype="bf16",
         tier="measured", passed=True, ms=1.0, **kw) -> Record:
    return Record(op=op, variant=variant, device=device, shape=shape, dtype=dtype, tier=tier,
                  passed=passed, target="triton-cuda", config={"BLOCK_N": 4096, "num_warps": 8},
                  metrics={"median_ms": ms, "gbps": 1.0 / ms}, spread={"p20_ms": ms * 0.9},
                  versions={"torch": "test"}, git_rev="abc", **kw)


def test_round_trip_and_reopen_adds(tmp_path):
    path = tmp_path / "results.sqlite"
    with ResultsStore(path, run_id="run-a") as s:
        rid = s.record(_rec(variant="a"))
        assert rid >= 1
    with ResultsStore(path, run_id="run-b") as s:
        s.record(_rec(variant="b"))
        hist = s.history("rmsnorm")
        assert [r.variant for r in hist] == ["a", "b"]
        assert [r.run_id for r in hist] == ["run-a", "run-b"]
        assert [(r.run_id, r.count) for r in s.runs()] == [("run-a", 1), ("run-b", 1)]
        first = hist[0]
        assert first.config == {"BLOCK_N": 4096, "num_warps": 8}
        assert first.shape == (4096, 4096)
        assert first.metrics["median_ms"] == 1.0
        assert first.passed is True and first.tier == "measured"
        assert first.timestamp  # filled by the store
        assert len(s) == 2


def test_best_per_shape(tmp_path):
    with ResultsStore(tmp_path / "r.sqlite", fill_env=False) as s:
        s.record(_rec(variant="slow", ms=2.0))
        s.record(_rec(variant="fast", ms=1.0))
        s.record(_rec(variant="fastest-but-wrong", ms=0.5, passed=False))
        s.record(_rec(variant="projected-only-faster", ms=0.7, tier="projected"))
        s.record(_rec(variant="interpreted", ms=0.1, tier="interpreted"))
        s.record(_rec(variant="other-device", ms=0.1, device="mi300x"))
        s.record(_rec(variant="proj-small", shape=(7, 13), ms=0.2, tier="projected"))
        s.record(_rec(variant="fp32", dtype="fp32", ms=3.0))
        best = s.best("rmsnorm", "h100")
        got = {(r.shape, r.dtype): r.variant for r in best}
        assert got == {((4096, 4096), "bf16"): "fast",  # measured beats a faster projection
                       ((4096, 4096), "fp32"): "fp32",
                       ((7, 13), "bf16"): "proj-small"}  # projected when nothing measured
        assert [r.variant for r in s.best("rmsnorm", "h100", shape=(7, 13))] == ["proj-small"]
        assert [r.variant for r in s.best("rmsnorm", "h100", dtype="fp32")] == ["fp32"]
        assert s.best("softmax", "h100") == []
        assert [r.variant for r in s.history("rmsnorm", device="mi300x")] == ["other-device"]


def test_concurrent_writers(tmp_path):
    path = tmp_path / "c.sqlite"
    shared = ResultsStore(path, fill_env=False)
    errors: list[BaseException] = []

    def write(store: ResultsStore, tag: str, n: int) -> None:
        try:
            for i in range(n):
                store.record(_rec(variant=f"{tag}-{i}"))
        except BaseException as exc:  # surfaced below; a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(shared, f"shared{t}", 25)) for t in range(4)]
    own = [ResultsStore(path, fill_env=False) for _ in range(2)]
    threads += [threading.Thread(target=write, args=(s, f"own{j}", 25)) for j, s in enumerate(own)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    variants = [r.variant for r in shared.history("rmsnorm")]
    assert len(variants) == 150 and len(set(variants)) == 150
    assert len(shared.runs()) == 3  # one run id per store instance
    for s in own + [shared]:
        s.close()


def test_interrupted_run_keeps_what_was_recorded(tmp_path):
    path = tmp_path / "i.sqlite"
    # A separate process records three rows, then dies without closing anything.
    code = (
        "import os, sys\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from harness.store import Record, ResultsStore\n"
        f"s = ResultsStore({str(path)!r}, run_id='dies', fill_env=False)\n"
        "for i in range(3):\n"
        "    s.record(Record(op='softmax', variant=f'v{i}', device='h100', tier='measured',\n"
        "                    passed=True, metrics={'median_ms': 1.0}))\n"
        "os._exit(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3, proc.stderr
    # And in this process, an exception mid-run after two records.
    s = ResultsStore(path, run_id="raises", fill_env=False)
    with pytest.raises(RuntimeError):
        for i in range(5):
            if i == 2:
                raise RuntimeError("interrupted")
            s.record(_rec(op="softmax", variant=f"w{i}"))
    reader = ResultsStore(path, fill_env=False)  # a fresh connection, the writer left open
    assert [r.variant for r in reader.history("softmax")] == ["v0", "v1", "v2", "w0", "w1"]
    s.close()
    reader.close()


def test_schema_version_and_bad_files(tmp_path):
    path = tmp_path / "v.sqlite"
    ResultsStore(path, fill_env=False).close()
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    con.execute("PRAGMA user_version=99")
    con.close()
    with pytest.raises(StoreError, match=r"v\.sqlite.*newer"):
        ResultsStore(path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="junk.sqlite"):
        ResultsStore(junk)


def test_record_validates_tier():
    with pytest.raises(ValueError, match="tier"):
        Record(op="x", variant="v", device="h100", tier="fast", passed=True)


def test_environment_filled_when_missing(tmp_path):
    with ResultsStore(tmp_path / "e.sqlite") as s:
        s.record(Record(op="x", variant="v", device="h100", tier="emitted", passed=True))
        rec = s.history("x")[0]
    assert rec.versions["torch"]
    assert "python" in rec.versions
