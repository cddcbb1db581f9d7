"""The emulated tier in a port: a Metal candidate judged on the CPU Metal executor.

`emulated_eval` has the signature of the port loop's CPU checks (porter.roles.benchmark's
`CPU_CHECKS[Capabilities.cpu_check]`, next to "interpreter"): the loop registers it as
`CPU_CHECKS["emulator"]`. It judges one pending Metal candidate in a worker process (a crash
ends only the worker, restarted for the next check) with `harness.emulated.check_source` at the
spec's reduced shapes, for the dtype the source was generated for, shares the verdict with identical
sources (one check per kernel body + semantic config), keeps to the run's check budget, and
records the verdict with the candidate at tier "emulated" when it passed.

`emulated_check(spec_path, source, hw_name, dtype)` is the same check without a port session
(tests, tools).
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter.errors import PorterError
from porter.verdicts import crash_message

if TYPE_CHECKING:
    import torch

    from hwmodels.model import HardwareModel
    from targets.base import TargetBackend

CHECK_TIMEOUT_S = 600
EMULATED = "emulated"
# Emulated checks have a budget of their own: one warm executor check takes 1-3 s, an op needs
# 9-18 distinct Metal sources, and sharing the interpreter's 6 would leave most M4 buckets
# unchecked. Applies where the port is budgeted (a CPU port by default); the variable overrides.
EMULATED_MAX_CHECKS_ENV = "PORTER_EMULATED_MAX_CHECKS"
EMULATED_MAX_CHECKS = 60


def emulated_budget(session: Any) -> int | None:
    """The emulated checks this port may run: None (no cap) where the port has no check cap."""
    if session.max_checks is None:
        return None
    raw = os.environ.get(EMULATED_MAX_CHECKS_ENV)
    if raw is None:
        return EMULATED_MAX_CHECKS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise PorterError(f"{EMULATED_MAX_CHECKS_ENV}={raw!r}: not a whole number >= 0")
    return value


def _emulated_spent(session: Any) -> int:
    """Emulated checks run so far, in this invocation and the interrupted ones before it."""
    if not hasattr(session, "emulated_spent"):
        session.emulated_spent = len({
            e.details["check"]["key"] for e in session.ledger
            if (e.details.get("check") or {}).get("emulated")
            and not e.details["check"].get("shared")})
    return session.emulated_spent


def emulated_eval(session: Any, hw: HardwareModel, backend: TargetBackend,
                  shape: tuple[int, ...], dtype: torch.dtype, bucket: str, p: Any) -> str:
    """The emulated tier of one pending candidate (porter.judge.common.Pending); the verdict
    recorded in the session's ledger. Returns the check's tolerance text ("" when none ran)."""
    from porter.judge.common import check_key
    from porter.judge.common import record_verdict
    from porter.planner import dtype_name
    from porter.verdicts import cfg_text

    dname = dtype_name(dtype)
    ckey = check_key(p)
    shared = ckey in session.checks
    if not shared:
        cap = emulated_budget(session)
        if cap is not None and _emulated_spent(session) >= cap:
            before = session.ledger.get(p.key)
            if before is None or before.verdict != "skipped":
                session.ledger.skip(target=hw.name, bucket=bucket, dtype=dname,
                                    config=p.cand.config, source_hash=p.src_hash, tier=p.tier,
                                    numbers=p.numbers, shape=shape, details=p.details,
                                    reason=f"emulated-check budget ({cap}) spent; rerun with "
                                           f"--run-dir and a larger {EMULATED_MAX_CHECKS_ENV} "
                                           "to check it")
            session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(p.cand.config)}: "
                           "skipped (check budget spent)")
            return ""
        session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(p.cand.config)}: checking on "
                       "the CPU Metal executor...")
        res = emulated_check(session.spec.path, p.source, hw.name, dname)
        session.checks_run += 1
        session.emulated_spent = _emulated_spent(session) + 1
        session.checks[ckey] = (res["passed"], res["message"], res["tolerances"])
        session.record(hw, backend.name, EMULATED, res["passed"], p.cand.config, shape, dname,
                       message=res["message"])
    else:
        session.checks_shared += 1
    passed, msg, tol = session.checks[ckey]
    p.details["check"] = {"key": ckey, "emulated": True, "passed": passed, "message": msg,
                          "tolerances": tol, "shared": shared}
    if passed:
        p.tier = EMULATED
    why = msg if not passed else ("emulated check shared with an identical source+config"
                                  if shared else "")
    record_verdict(session, hw, bucket, dname, shape, p, passed=passed, why=why)
    return tol


def emulated_check(spec_path: str | Path, source: str, hw_name: str, dtype: str,
                   timeout_s: float = CHECK_TIMEOUT_S) -> dict[str, Any]:
    """The five stages for Metal `source` on the executor, in a worker process.

    One worker process serves every check of this process (torch and the spec are imported once,
    which is most of a check's time); a crash or a check past `timeout_s` ends the worker (the
    verdict says so) and the next check starts a fresh one.

    Args:
        spec_path: the op's spec (or KernelBench file).
        source: generated Metal source with its dispatch line.
        hw_name: the target's model ("m4"): tolerances and threadgroup memory limit.
        dtype: "fp32" | "fp16" | "bf16": the dtype the source was generated for.
        timeout_s: the check's time limit.

    Returns:
        {"passed": bool, "message": str, "tolerances": str}.

    Raises:
        porter.errors.PortError: the spec's own code failed while the kernel was judged.
    """
    from porter.errors import PortError

    job = {"spec": str(Path(spec_path).resolve()), "source": source, "hw": hw_name,
           "dtype": dtype}
    t0 = time.perf_counter()
    res = _WORKER.run(job, timeout_s)
    if res.get("problem"):
        raise PortError(f"{spec_path}: the spec's own code failed while its Metal kernel was "
                        f"judged on the executor: {' '.join(res['problem'].split())}")
    if res["passed"]:
        res["message"] = (f"passed {res['message']} on the CPU Metal executor in "
                          f"{time.perf_counter() - t0:.1f}s")
    return res


_RESULT = "\x1eporter-emulated "  # marks the verdict line among anything else the child prints


class _Worker:
    """A child process that runs checks one after another (`serve`), restarted after a crash."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.stderr: Any = None
        self.lock = threading.Lock()

    def _start(self) -> subprocess.Popen[str]:
        import tempfile

        repo = str(Path(__file__).resolve().parents[1])
        env = {**os.environ,
               "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
        if self.stderr is not None:
            self.stderr.close()
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the worker
        serve = "from porter.emulated import serve; serve()"
        return subprocess.Popen([sys.executable, "-c", serve],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=self.stderr, text=True, env=env, bufsize=1)

    def _stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                if stream is not None:
                    stream.close()
        self.proc = None

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        return " | ".join(self.stderr.read().strip().splitlines()[-3:])

    def run(self, job: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        import select

        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.proc = self._start()
            proc = self.proc
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps(job) + "\n")
                proc.stdin.flush()
            except BrokenPipeError:
                pass
            deadline = time.monotonic() + timeout_s
            while True:
                left = deadline - time.monotonic()
                ready = select.select([proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
                if not ready:
                    self._stop()
                    return {"passed": False, "tolerances": "",
                            "message": f"emulated check timed out after {timeout_s:g}s"}
                line = proc.stdout.readline()
                if not line:  # the worker died
                    code = proc.wait()
                    tail = self._stderr_tail()
                    self._stop()
                    return {"passed": False, "tolerances": "",
                            "message": crash_message("emulated check", code, tail)}
                if line.startswith(_RESULT):
                    return json.loads(line[len(_RESULT):])


    def close(self) -> None:
        """End the worker: its stdin closed, it finishes its loop (killed after 5 s)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None


_WORKER = _Worker()
atexit.register(_WORKER.close)


def serve() -> None:
    """Worker side of `emulated_check`: one job (JSON) per line on stdin, one verdict each."""
    for line in sys.stdin:
        if line.strip():
            res = _judge(json.loads(line))
            sys.stdout.write(_RESULT + json.dumps(res) + "\n")
            sys.stdout.flush()


def check_child() -> None:
    """One job (JSON) on stdin, its verdict (JSON) on stdout."""
    print(json.dumps(_judge(json.loads(sys.stdin.read()))))


def _judge(job: dict[str, Any]) -> dict[str, Any]:
    import torch

    import hwmodels
    from harness.emulated import check_source
    from porter.specs import load_spec
    from targets.metal_exec import MetalExecError
    from targets.metal_host import DispatchError

    spec = load_spec(job["spec"])
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[job["dtype"]]
    hw = hwmodels.get(job["hw"])
    try:
        report = check_source(spec.problem(interpret=True, dtypes=[dtype]), job["source"], hw=hw)
    except (MetalExecError, DispatchError) as exc:
        return {"passed": False, "tolerances": "",
                "message": f"not runnable on the executor: {exc}"}
    except ValueError as exc:  # harness.problem.ProblemError: the spec's own code failed
        return {"passed": False, "message": "", "tolerances": "",
                "problem": f"{type(exc).__name__}: {exc}"}
    if report.passed:
        msg = ", ".join(s.name for s in report.stages)
    else:
        failed = report.failed
        msg = f"{failed.name}: {failed.message}" if failed is not None else report.summary()
    return {"passed": report.passed, "message": msg, "tolerances": report.tolerances}


class SpecMetalCandidate:
    """The spec's generated Metal kernel as a judge candidate for every dtype and shape: per
    call, the source for the inputs' dtype with the Metal default config for their sizes
    (porter.codegen.metal.default_config), built once per (dtype, config) and run on the CPU
    executor. For `porter check --target m4`."""

    def __init__(self, spec: Any, hw: HardwareModel) -> None:
        import torch

        from porter.codegen import generate

        example = spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0], torch.device("cpu"),
                                   torch.Generator().manual_seed(0))
        self.op = generate(spec.reference, tuple(example), name=spec.name)
        self.hw = hw
        self._built: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
        self.__name__ = f"metal:{spec.name}"

    def config_for(self, inputs: tuple[Any, ...]) -> dict[str, Any]:
        """The Metal config this call runs (dtype included)."""
        import torch

        from porter.codegen import metal
        from targets.dtypes import dtype_name

        first = next(t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point())
        extent = max(t.numel() for t in inputs if isinstance(t, torch.Tensor))
        cfg = metal.default_config(self.op, self.op.problem_sizes(inputs),
                                   int(self.hw.limits.max_threads_per_block.value),
                                   int(self.hw.warp_size),
                                   "i32" if 4 * extent < 2 ** 31 else "i64")
        return {**cfg, "dtype": dtype_name(first.dtype)}

    def __call__(self, *inputs: Any, out: Any) -> Any:
        from targets.metal import MetalBackend

        cfg = self.config_for(inputs)
        key = (cfg["dtype"], tuple(sorted(cfg.items())))
        if key not in self._built:
            self._built[key] = MetalBackend().candidate(self.op.metal_source(cfg), self.hw)
        return self._built[key](*inputs, out=out)
