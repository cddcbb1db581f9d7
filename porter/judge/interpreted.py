"""The interpreted tier: a candidate checked by the harness under the Triton interpreter, in a
child process, at the spec's reduced shapes; one check shared by every identical kernel body
and semantic config across targets, within the run's check budget."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING
from typing import Any

from porter.errors import PortError
from porter.judge.common import Pending
from porter.judge.common import check_key
from porter.judge.common import record_verdict
from porter.ledger import source_hash
from porter.planner import dtype_name
from porter.verdicts import cfg_text
from porter.verdicts import crash_message
from targets.tiers import Tier

if TYPE_CHECKING:
    import torch

    from hwmodels.model import HardwareModel
    from porter.session import PortSession
    from targets.base import TargetBackend


def interpreted_eval(session: PortSession, hw: HardwareModel, backend: TargetBackend,
                     shape: tuple[int, ...], dtype: torch.dtype, bucket: str,
                     p: Pending) -> str:
    """The interpreted tier of one candidate: its check (shared when an identical kernel body
    and semantic config was checked before, on any target), within the run's check budget
    (past it the candidate is skipped, not rejected); the verdict recorded. Returns the
    tolerance text of the check ("" when none ran)."""
    dname = dtype_name(dtype)
    ckey = check_key(p)
    shared = ckey in session.checks
    if not shared:
        if session.max_checks is not None and session.checks_spent >= session.max_checks:
            before = session.ledger.get(p.key)
            if before is None or before.verdict != "skipped":
                # a skip is not "done": a resumed run with a larger budget checks it
                session.ledger.skip(target=hw.name, bucket=bucket, dtype=dname,
                                 config=p.cand.config, source_hash=p.src_hash, tier=p.tier,
                                 numbers=p.numbers, shape=shape, details=p.details,
                                 reason=f"interpreted-check budget ({session.max_checks}) spent; "
                                        "rerun with --run-dir and a larger --max-checks to "
                                        "check it, or on the device")
            session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(p.cand.config)}: "
                         "skipped (check budget spent)")
            return ""
        session.detail(f"  [{hw.name}] {bucket}/{dname} {cfg_text(p.cand.config)}: checking under "
                     "the Triton interpreter (CPU)...")
        res = interpreted_check(session.spec.path, p.source, p.cand.config, hw.name,
                                session.run_dir)
        session.checks_run += 1
        session.checks_spent += 1
        session.checks[ckey] = (res["passed"], res["message"], res["tolerances"])
        session.record(hw, backend.name, Tier.INTERPRETED, res["passed"], p.cand.config, shape,
                     dname, message=res["message"])
    else:
        session.checks_shared += 1
    passed, msg, tol = session.checks[ckey]
    p.details["check"] = {"key": ckey, "interpreted": True, "passed": passed,
                          "message": msg, "tolerances": tol, "shared": shared}
    if passed:
        p.tier = Tier.INTERPRETED
    why = msg if not passed else ("interpreted check shared with an identical kernel "
                                  "body+config on another target" if shared else "")
    record_verdict(session, hw, bucket, dname, shape, p, passed=passed, why=why)
    return tol


CHECK_TIMEOUT_S = 600


def interpreted_check(spec_path: Path, source: str, config: dict[str, Any], hw_name: str,
                       run_dir: Path) -> dict[str, Any]:
    """Run harness.check under the Triton interpreter in a child process; returns its verdict.

    A child process because `triton.language` decides at import whether its library functions
    (tl.sum, ...) are interpreted, and the same process must cross-compile with them compiled:
    one process cannot do both. The child starts with TRITON_INTERPRET=1 set.
    """
    import subprocess

    folder = run_dir / "_checks"
    folder.mkdir(parents=True, exist_ok=True)
    src_file = folder / f"{source_hash(source)[:16]}.py"
    src_file.write_text(source)
    job = {"spec": str(Path(spec_path).resolve()), "source": str(src_file.resolve()),
           "config": config, "hw": hw_name}
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "TRITON_INTERPRET": "1", "TRITON_DEFAULT_FP_FUSION": "1",
           "PORTER_CHECK_TARGET": hw_name,  # answers a user launcher's device questions
           "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", "from porter.judge.interpreted import "
                               "check_child; check_child()"], input=json.dumps(job),
                              capture_output=True, text=True, env=env, timeout=CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"passed": False, "tolerances": "",
                "message": f"interpreted check timed out after {CHECK_TIMEOUT_S}s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"passed": False, "tolerances": "",
                "message": crash_message("interpreted check", proc.returncode,
                                         " | ".join(tail))}
    res = json.loads(lines[-1])
    if res.get("problem"):
        raise PortError(f"{spec_path}: the spec's own code failed while its kernel was judged "
                        f"under the interpreter: {' '.join(res['problem'].split())}")
    if res["passed"]:
        res["message"] = (f"passed {res['message']} under the Triton interpreter in "
                          f"{time.perf_counter() - t0:.1f}s")
    return res


def check_child() -> None:
    """Child side of `interpreted_check`: reads a job (JSON) on stdin, prints the verdict."""
    import torch

    import hwmodels
    from harness import check
    from porter import codegen
    from porter.codegen.loading import load_generated_module
    from porter.specs import load_spec


    job = json.loads(sys.stdin.read())
    spec = load_spec(job["spec"])
    source = Path(job["source"]).read_text()
    module = load_generated_module(source, f"check_{spec.name}", True)
    config = job["config"]
    hw = hwmodels.get(job["hw"])
    example = spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0], torch.device("cpu"),
                               torch.Generator().manual_seed(0))
    gen_op = codegen.generate(spec.reference, tuple(example), name=spec.name)
    candidate = RefittingCandidate(module, gen_op, hw, config)
    refitted = candidate.refitted

    try:
        report = check(spec.problem(), candidate, device="cpu", interpret=True, hw=hw)
    except ValueError as exc:
        # harness.check raises ValueError (ProblemError) when the problem's own code fails, e.g.
        # a reference that raises at a later sweep shape: no verdict on the candidate.
        print(json.dumps({"passed": False, "message": "", "tolerances": "",
                          "problem": f"{type(exc).__name__}: {exc}"}))
        return
    if report.passed:
        msg = ", ".join(s.name for s in report.stages)
        if refitted:
            msg += (f" (size knobs re-derived at {len(set(refitted))} judge shape(s) the bucket's "
                    "BLOCK_N does not cover)")
    else:
        failed = report.failed
        msg = f"{failed.name}: {failed.message}" if failed is not None else report.summary()
    print(json.dumps({"passed": report.passed, "message": msg,
                      "tolerances": report.tolerances}))


# Rowwise strategies whose block holds the whole row (BLOCK_N, plus BLOCK_TAIL for two_block,
# >= the row's length).
ONE_BLOCK_STRATEGIES = ("single_pass", "persistent", "two_block")


class RefittingCandidate:
    """The generated launcher with one config, as a harness candidate (out contract).

    A bucket's config pins size knobs (BLOCK_N) for its GPU-size shape; at the judge's other
    shapes those are re-derived the way the launcher would, and every other knob (strategy,
    ROWS, warps, ...) stays as tested, unless the row is too long for one block, where the
    launcher's own (looped) config runs, as the pack's loader does. `refitted` lists the shapes
    where either happened.
    """

    def __init__(self, module: Any, gen_op: Any, hw: Any, config: dict[str, Any]) -> None:
        self.module, self.gen_op, self.hw, self.config = module, gen_op, hw, config
        self.refitted: list[tuple[int, ...]] = []

    def __call__(self, *inputs: Any, out: Any = None) -> Any:
        import torch

        from porter.codegen import heuristics

        cfg = self.config
        first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
        if first is not None and not config_fits(self.gen_op, self.hw, inputs, cfg):
            fresh = self.gen_op.default_config(self.hw, tuple(inputs), first.dtype)
            if fresh.get("strategy") in ONE_BLOCK_STRATEGIES:
                n_cols = self.gen_op.problem_sizes(tuple(inputs))["n_cols"]
                cfg = {**cfg, **heuristics.one_block_sizes(cfg["strategy"], n_cols)}
            else:
                # The row needs another kernel (looped, or the column kernel of a reduction over
                # a dim that is not the last): the launcher's own config, as the loader runs it
                # (a one-block config with a looped BLOCK_N is no config at all).
                cfg = fresh
            self.refitted.append(tuple(first.shape))
        return self.module.launch(*inputs, out=out, config=cfg)


def config_fits(gen_op: Any, hw: Any, inputs: tuple[Any, ...], config: dict[str, Any]) -> bool:
    """Whether `config`'s size knobs cover these inputs (a one-block row must hold the row).

    The row is the reduced length (the op's n_cols), which is the last dim only for a
    reduction over the last dim: RMS norm over the channels of (N, C, H, W) reduces C, and
    comparing BLOCK_N with W refitted every such config to another kernel (the device judge
    then timed the column kernel and the pack shipped the strided row kernel, 12x slower).
    """
    import torch

    first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
    if (first is None or config.get("strategy") not in ONE_BLOCK_STRATEGIES
            or "BLOCK_N" not in config):
        return True
    n_cols = gen_op.problem_sizes(tuple(inputs)).get("n_cols", int(first.shape[-1]))
    return int(config["BLOCK_N"]) + int(config.get("BLOCK_TAIL", 0)) >= int(n_cols)
