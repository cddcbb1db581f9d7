"""Fan work out over many GPUs with Dask distributed: one worker per GPU, results to one store.

Not a home-made scheduler: Dask does the placement, the retries and the bookkeeping.

- **Where**: `dask_cuda.LocalCUDACluster` (one worker per visible GPU, each pinned to its GPU
  through CUDA_VISIBLE_DEVICES) when dask-cuda is installed and GPUs are visible; else a
  `distributed.LocalCluster` of CPU processes (tests, or a machine without dask-cuda: pass
  `n_workers` = the GPU count and each worker pins itself, see `_pin_gpu`); or an existing
  scheduler (`address`, e.g. "tcp://10.0.0.5:8786") for many hosts.
- **What**: a task is a plain importable function and its arguments. It runs on a worker, detects
  the worker's device itself (`worker_info`), and returns plain data; the client, one process,
  writes what comes back to the one results store (`ResultsStore.add`, which skips records it
  already holds, so a retried task cannot duplicate rows).
- **When a worker dies**: Dask's scheduler re-runs the tasks that worker had in flight on another
  worker (its `allowed-failures`, default 3) and nothing else; with one thread per worker that is
  one task. Tasks that raise are retried `retries` times (Dask's `retries=`).

`porter bench --suite DIR --cluster [ADDRESS]` runs the benchmark suite this way, one op per
task (`run_suite`). Without Dask installed (`pip install kernel-porter[fleet]`) the single-process
path is unchanged and `--cluster` says in one line what to install.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from porter.errors import PorterError

log = logging.getLogger(__name__)

FLEET_EXTRA = "pip install kernel-porter[fleet]"
REPO = Path(__file__).resolve().parents[1]


class FanoutUnavailable(PorterError):
    """Dask distributed is not installed, or the scheduler cannot be reached."""


@dataclass(frozen=True)
class Task:
    """One unit of work: `fn(*args)` on some worker. `key` names it (unique per run)."""

    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()


@dataclass
class TaskResult:
    key: str
    value: Any
    worker: str  # the worker's address
    seconds: float  # wall time from submission to result, as the client saw it


@dataclass
class FanoutReport:
    results: list[TaskResult]
    wall_s: float
    workers: list[dict[str, Any]] = field(default_factory=list)  # `worker_info` of each worker
    added: int = 0  # records written to the store
    skipped: int = 0  # records the store already held


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise FanoutUnavailable(f"fan-out needs Dask distributed ({FLEET_EXTRA})") from None
    return distributed


def _gpu_count() -> int:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    return len([p for p in Path("/dev").glob("nvidia[0-9]*")])


def make_client(address: str | None = None, *, n_workers: int | None = None,
                processes: bool = True) -> Any:
    """A Dask client: to `address`, else to a new local cluster (see the module docstring).

    Raises:
        FanoutUnavailable: Dask is not installed, or `address` does not answer in 30 s.
    """
    distributed = _distributed()
    if address:
        try:
            return distributed.Client(address, timeout="30s")
        except OSError as exc:
            raise FanoutUnavailable(f"no Dask scheduler at {address}: {exc}") from None
    gpus = _gpu_count()
    if n_workers is None and gpus:
        try:
            from dask_cuda import LocalCUDACluster
        except ImportError:
            log.info("fanout: dask-cuda not installed; %d CPU-process workers pin their GPUs",
                     gpus)
        else:
            return distributed.Client(LocalCUDACluster(threads_per_worker=1))
    n = n_workers or gpus or 2
    cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=processes,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    if gpus and not n_workers:
        # A plugin, not a one-off client.run: a worker the nanny restarts is pinned again.
        client.register_plugin(_pin_gpu_plugin(distributed, gpus))
    return client


def _pin_gpu_plugin(distributed: Any, gpus: int) -> Any:
    """A worker plugin giving each plain LocalCluster worker one GPU of its own (what dask-cuda
    does for us): LocalCluster names its workers 0, 1, ...; worker i takes GPU i mod `gpus`,
    before the worker's first CUDA call (tasks run the suite in child processes, which inherit
    it)."""

    class PinGPU(distributed.WorkerPlugin):  # type: ignore[misc, name-defined]
        name = "porter-pin-gpu"

        def setup(self, worker: Any) -> None:
            name = str(worker.name)
            index = int(name) if name.isdigit() else 0
            os.environ["CUDA_VISIBLE_DEVICES"] = str(index % gpus)

    return PinGPU()


def worker_info() -> dict[str, Any]:
    """Where a task runs: host, pid, the GPU it sees and its hardware model (None on a CPU)."""
    info: dict[str, Any] = {"host": socket.gethostname(), "pid": os.getpid(),
                            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                            "device": None}
    try:
        import hwmodels

        det = hwmodels.detect()
        info["device"] = det.model.name if det.model is not None else None
        info["device_name"] = getattr(det, "device_name", None)
    except Exception as exc:  # noqa: BLE001 - detection degrades to "no device", with why
        info["detect_error"] = str(exc)
    return info


def run_tasks(tasks: Sequence[Task], *, client: Any = None, address: str | None = None,
              n_workers: int | None = None, retries: int = 1,
              store_path: str | Path | None = None,
              to_records: Callable[[Any], Sequence[Any]] | None = None) -> FanoutReport:
    """Run `tasks` on a Dask cluster and gather their results (in completion order).

    Args:
        tasks: the work; keys must be unique.
        client: an existing `distributed.Client` (else one is made: `make_client`).
        address: scheduler address when no client is given.
        n_workers: local workers when neither is given.
        retries: how many times a task that raises is run again (Dask's own `retries`).
        store_path: the one results store the client writes to.
        to_records: turns a task's value into `harness.store.Record`s for the store.

    Returns:
        A `FanoutReport` (results, wall time, each worker's `worker_info`, store counts).

    Raises:
        FanoutUnavailable: no Dask; ValueError: duplicate keys; the task's own exception when it
        still fails after its retries.
    """
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise ValueError(f"fanout.run_tasks: duplicate task keys in {keys}")
    distributed = _distributed()
    own = client is None
    if own:
        client = make_client(address, n_workers=n_workers)
    t0 = time.perf_counter()
    try:
        workers = list(client.run(worker_info).values())
        futures = {}
        submitted = {}
        for t in tasks:
            fut = client.submit(t.fn, *t.args, key=t.key, retries=retries, pure=False)
            futures[fut] = t.key
            submitted[t.key] = time.perf_counter()
        results: list[TaskResult] = []
        for fut, value in distributed.as_completed(list(futures), with_results=True):
            key = futures[fut]
            where = client.who_has([fut]).get(key) or ()
            results.append(TaskResult(key=key, value=value,
                                      worker=next(iter(where), "?"),
                                      seconds=time.perf_counter() - submitted[key]))
        report = FanoutReport(results=results, wall_s=time.perf_counter() - t0,
                              workers=workers)
    finally:
        if own:
            cluster = getattr(client, "cluster", None)
            client.close()
            if cluster is not None:
                cluster.close()
    if store_path is not None and to_records is not None:
        from harness.store import ResultsStore

        with ResultsStore(store_path, fill_env=False) as store:
            for r in results:
                a, s = store.add(list(to_records(r.value)))
                report.added += a
                report.skipped += s
    return report


# -- the benchmark suite, one op per task ------------------------------------------------------

def _die_with_parent() -> None:
    """In the child, before exec: ask Linux to SIGKILL it when the worker dies (PR_SET_PDEATHSIG),
    so a killed worker leaves no orphan holding its GPU while the retry runs elsewhere."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the child may outlive a killed worker


def run_child(cmd: Sequence[str], *, cwd: str | Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    """Run `cmd` from a task, output captured, killed with the worker if the worker dies."""
    return subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, check=False,
                          preexec_fn=_die_with_parent if sys.platform == "linux" else None)


def suite_op_task(op: str, out_dir: str, reps: int) -> dict[str, Any]:
    """Run the suite for one op on this worker's GPU (`python -m bench.suite --ops OP`), in a
    child process of the worker so a crashed CUDA context ends that run, not the worker.

    Returns:
        {"op", "dir", "worker": worker_info(), "returncode", "rows": [row dicts], "meta"}.

    Raises:
        RuntimeError: the suite failed (Dask retries the task; the output's tail says why).
    """
    info = worker_info()
    part = Path(out_dir) / "parts" / op
    cmd = [sys.executable, "-m", "bench.suite", "--ops", op, "--out", str(part),
           "--reps", str(reps)]
    proc = run_child(cmd, cwd=REPO)
    (part.parent / f"{op}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"suite op {op} on {info['host']}:{info['cuda_visible_devices']} "
                           f"exited {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]}")
    return collect_part(op, part, info)


def collect_part(op: str, part: Path, info: dict[str, Any]) -> dict[str, Any]:
    """A finished op folder as a task's value."""
    rows = [json.loads(ln) for ln in (part / "rows.jsonl").read_text().splitlines() if ln]
    meta = json.loads((part / "meta.json").read_text())
    return {"op": op, "dir": str(part), "worker": info, "rows": rows, "meta": meta}


def run_suite(out_dir: str | Path, ops: Sequence[str], *, reps: int = 50,
              address: str | None = None, n_workers: int | None = None,
              store_path: str | Path | None = None,
              task: Callable[..., dict[str, Any]] = suite_op_task, client: Any = None,
              retries: int = 1) -> FanoutReport:
    """The suite over a Dask cluster: one op per task, the parts merged into `out_dir` (rows in
    the suite's op order, whatever order they finished in) and written to the store.

    Writes `out_dir/rows.jsonl`, `meta.json` (the first part's, plus every worker and wall
    times under "fanout") and `fanout.json`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = [Task(key=f"suite-{op}", fn=task, args=(op, str(out), reps)) for op in ops]

    def to_records(value: dict[str, Any]) -> list[Any]:
        from porter.suite_import import suite_records

        return suite_records(value["dir"])

    report = run_tasks(tasks, client=client, address=address, n_workers=n_workers,
                       retries=retries, store_path=store_path,
                       to_records=to_records if store_path is not None else None)
    by_op = {r.value["op"]: r for r in report.results}
    rows = [row for op in ops for row in by_op[op].value["rows"]]
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    meta = dict(by_op[ops[0]].value["meta"])
    fan = {"wall_s": report.wall_s, "workers": report.workers,
           "tasks": [{"op": r.value["op"], "worker": r.worker, "seconds": r.seconds,
                      "device": r.value["worker"].get("device"),
                      "cuda_visible_devices": r.value["worker"].get("cuda_visible_devices")}
                     for r in report.results]}
    meta["fanout"] = fan
    (out / "meta.json").write_text(json.dumps(meta, indent=2))
    (out / "fanout.json").write_text(json.dumps(fan, indent=2))
    return report
