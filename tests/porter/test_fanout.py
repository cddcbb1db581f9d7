"""Fan-out over Dask distributed, on a local cluster of CPU processes (no GPU).

One cluster (2 worker processes, one thread each) serves the module; each test's tasks are plain
functions of this module, which the workers import.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.store import Record
from harness.store import ResultsStore
from porter import fanout

distributed = pytest.importorskip(
    "distributed", reason="Dask distributed is not installed (the `fleet` extra: "
    "pip install kernel-porter[fleet]); CI should install it with the test extra")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def _attempt(marker_dir: str, key: str) -> int:
    """Count this run of `key` in a file per attempt; return the attempt number (1-based)."""
    d = Path(marker_dir)
    n = len(list(d.glob(f"{key}.*"))) + 1
    (d / f"{key}.{n}").write_text(str(os.getpid()))
    return n


def square_task(marker_dir: str, key: str, x: int) -> dict:
    _attempt(marker_dir, key)
    time.sleep(0.2)
    return {"key": key, "x": x, "y": x * x, "pid": os.getpid()}


def dies_once_task(marker_dir: str, key: str, x: int) -> dict:
    """Kill the worker process on the first attempt (mid-task), succeed on the retry."""
    if _attempt(marker_dir, key) == 1:
        time.sleep(0.3)  # let the other tasks start: they must not be lost with this worker
        os._exit(1)
    return {"key": key, "x": x, "y": x * x, "pid": os.getpid()}


def fails_once_task(marker_dir: str, key: str) -> str:
    if _attempt(marker_dir, key) == 1:
        raise RuntimeError("transient")
    return "ok"


def _record(value: dict) -> list[Record]:
    return [Record(op="sq", variant="v", device="cpu", tier="measured", passed=True,
                   shape=(value["x"],), dtype="fp32", run_id="fan",
                   timestamp="2026-11-26T00:00:00+00:00", versions={"v": "1"}, git_rev="r",
                   metrics={"median_ms": float(value["y"])})]


def test_tasks_spread_over_workers_and_land_in_one_store(client, tmp_path):
    store = tmp_path / "s.sqlite"
    tasks = [fanout.Task(key=f"sq-{i}", fn=square_task, args=(str(tmp_path), f"sq-{i}", i))
             for i in range(6)]
    report = fanout.run_tasks(tasks, client=client, store_path=store, to_records=_record)
    assert sorted(r.value["y"] for r in report.results) == [i * i for i in range(6)]
    assert len({r.value["pid"] for r in report.results}) == 2  # both workers took a share
    assert len(report.workers) == 2 and all(w["device"] is None for w in report.workers)
    assert (report.added, report.skipped) == (6, 0)
    with ResultsStore(store, fill_env=False) as s:
        assert len(s) == 6
    # The same results again add nothing: the store dedupes by content.
    again = fanout.run_tasks(tasks[:2], client=client, store_path=store, to_records=_record)
    assert (again.added, again.skipped) == (0, 2)


def test_a_worker_that_dies_loses_only_its_in_flight_task(client, tmp_path):
    tasks = [fanout.Task(key="dies", fn=dies_once_task, args=(str(tmp_path), "dies", 7))]
    tasks += [fanout.Task(key=f"ok-{i}", fn=square_task, args=(str(tmp_path), f"ok-{i}", i))
              for i in range(4)]
    report = fanout.run_tasks(tasks, client=client, retries=0)
    values = {r.key: r.value for r in report.results}
    assert values["dies"]["y"] == 49
    attempts = {k: len(list(tmp_path.glob(f"{k}.*"))) for k in values}
    assert attempts["dies"] == 2  # killed mid-task once, re-run by the scheduler elsewhere
    assert all(attempts[f"ok-{i}"] == 1 for i in range(4))  # nothing else was lost or re-run
    first_pid = int((tmp_path / "dies.1").read_text())
    assert values["dies"]["pid"] != first_pid
    # the cluster has its two workers again (the nanny restarted the dead one)
    client.wait_for_workers(2, timeout=30)


def test_a_task_that_raises_is_retried_by_dask(client, tmp_path):
    t = [fanout.Task(key="flaky", fn=fails_once_task, args=(str(tmp_path), "flaky"))]
    assert fanout.run_tasks(t, client=client, retries=1).results[0].value == "ok"
    t2 = [fanout.Task(key="flaky2", fn=fails_once_task, args=(str(tmp_path), "flaky2"))]
    with pytest.raises(RuntimeError, match="transient"):
        fanout.run_tasks(t2, client=client, retries=0)
    with pytest.raises(ValueError, match="duplicate"):
        fanout.run_tasks(t + t, client=client)


def fake_suite_task(op: str, out_dir: str, reps: int) -> dict:
    """Stands in for `suite_op_task` (which needs a GPU): writes an op folder as the suite
    would, one ported row and one copy row."""
    part = Path(out_dir) / "parts" / op
    part.mkdir(parents=True, exist_ok=True)
    rows = [{"op": op, "provider": p, "shape": [8, 8], "dtype": "bf16", "device": "h100",
             "median_ms": 0.01 * (1 + len(op)) * (2 if p == "copy" else 1), "bytes_moved": 256,
             "flops": 0, "config": {"R": reps}} for p in ("ported", "copy")]
    (part / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (part / "meta.json").write_text(json.dumps({"date": "2026-11-26", "git_rev": "abc",
                                                "versions": {}}))
    return fanout.collect_part(op, part, fanout.worker_info())


def test_run_suite_merges_parts_in_op_order_into_one_folder_and_store(client, tmp_path):
    ops = ["softmax", "rmsnorm", "gelu"]
    out, store = tmp_path / "run", tmp_path / "s.sqlite"
    report = fanout.run_suite(out, ops, reps=5, client=client, store_path=store,
                              task=fake_suite_task)
    rows = [json.loads(ln) for ln in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["op"] for r in rows if r["provider"] == "ported"] == ops
    meta = json.loads((out / "meta.json").read_text())
    assert {t["op"] for t in meta["fanout"]["tasks"]} == set(ops)
    assert report.added == 6
    with ResultsStore(store, fill_env=False) as s:
        assert [r.op for r in s.best("gelu", "h100")] == ["gelu"]


def test_without_dask_the_cluster_path_says_what_to_install(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_dask(name, *args, **kwargs):
        if name == "distributed" or name.startswith("distributed."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dask)
    with pytest.raises(fanout.FanoutUnavailable, match=r"kernel-porter\[fleet\]"):
        fanout.make_client()
    from porter.cli import main

    result = CliRunner().invoke(main, ["bench", "--suite", "/tmp/unused-out", "--cluster"])
    assert result.exit_code == 2
    assert "kernel-porter[fleet]" in result.output
    assert len(result.output.strip().splitlines()) == 1


def _visible() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def test_plain_local_cluster_pins_one_gpu_per_worker(monkeypatch):
    """Without dask-cuda, a machine with 2 GPUs gets 2 workers, each seeing one GPU of its own
    (no GPU is touched: only the variable each worker's tasks and their children inherit)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setitem(__import__("sys").modules, "dask_cuda", None)  # as if not installed
    c = fanout.make_client()
    try:
        assert sorted(c.run(_visible).values()) == ["0", "1"]
    finally:
        cluster = c.cluster
        c.close()
        cluster.close()


SLEEPER = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(120)"


def dies_with_child_task(marker_dir: str, key: str) -> str:
    """First attempt: start a long child (as the suite task does), then the worker dies."""
    import sys
    import threading

    if _attempt(marker_dir, key) == 1:
        pidfile = Path(marker_dir) / "child.pid"

        def kill_worker_when_child_runs() -> None:
            for _ in range(200):
                if pidfile.exists() and pidfile.read_text():
                    os._exit(1)
                time.sleep(0.05)
            os._exit(1)

        threading.Thread(target=kill_worker_when_child_runs, daemon=True).start()
        fanout.run_child([sys.executable, "-c", SLEEPER, str(pidfile)])
    return "ok"


def _alive(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    if not status.exists():
        return False
    return "State:\tZ" not in status.read_text()  # a zombie is dead, waiting to be reaped


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="checks /proc (Linux)")
def test_a_dead_workers_child_process_dies_with_it(client, tmp_path):
    t = [fanout.Task(key="child", fn=dies_with_child_task, args=(str(tmp_path), "child"))]
    assert fanout.run_tasks(t, client=client, retries=0).results[0].value == "ok"
    pid = int((tmp_path / "child.pid").read_text())
    deadline = time.time() + 10
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.1)
    assert not _alive(pid), "the killed worker's child kept running"
    client.wait_for_workers(2, timeout=30)
