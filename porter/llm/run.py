"""One `--agent claude` run: the agent over every target, the pack, the summary.

`run_agent` drives `porter.llm.agent.Agent` target by target, turns what each kept into the
porter's `PortResult`, writes the pack with the porter's pack writer, and writes
`<run>/llm/summary.json` (per target: kept kernel, tier, why the loop stopped; for the run: tokens
in/out, cache writes/reads, an estimated cost, device seconds). `make_client` gives the run its
client: the SDK recording into the run folder, or the replay of a recorded run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import replace
from pathlib import Path
from typing import Any

from porter.llm.agent import NUMBER_KEYS
from porter.llm.agent import ORIGIN
from porter.llm.agent import Agent
from porter.llm.client import LLMClient
from porter.llm.config import LLMConfig
from porter.llm.inputs import dtype_name
from porter.llm.record import Recorder
from porter.session import input_kinds

RUN_FILE = "run.json"


@dataclass(frozen=True)
class AgentResult:
    port: Any  # porter.results.PortResult
    summary: dict[str, Any]
    pack_path: Path | None


def run_agent(spec_path: str | Path, targets: list[str], out_dir: str | Path | None, *,
              run_dir: str | Path, client: LLMClient, config: LLMConfig,
              progress: Callable[[str], None] | None = None,
              replace_pack: bool = False) -> AgentResult:
    """Port the op in `spec_path` to `targets` with the Claude roles; write the pack.

    Args:
        spec_path: an op spec or KernelBench file (optionally naming a Triton or CUDA kernel).
        targets: hardware-model names.
        out_dir: the packs folder; None: no pack.
        run_dir: the run folder (artifacts per target, ledger, llm/exchanges.jsonl).
        client: the LLM client (its transport: the SDK, or a replay).
        config: the LLM settings (budgets, parallel candidates, stop rules).

    Returns:
        The PortResult (the pack's input), the summary, and the pack folder.
    """
    import torch

    import hwmodels
    from harness import env_info
    from harness.tolerance import tolerance
    from porter.packs.format import shape_bucket
    from porter.packs.writer import write_pack
    from porter.specs import load_spec

    try:  # where the port's result types live once porter/port.py is split (issue 29)
        from porter.results import BucketChoice
        from porter.results import PortResult
        from porter.results import TargetResult
    except ImportError:
        from porter.port import BucketChoice
        from porter.port import PortResult
        from porter.port import TargetResult

    rd = Path(run_dir)
    (rd / "llm").mkdir(parents=True, exist_ok=True)
    (rd / "llm" / "config.json").write_text(json.dumps(config.resolved(), indent=2) + "\n")
    # what `porter port --replay RUN_DIR` needs to run this again
    (rd / "llm" / RUN_FILE).write_text(json.dumps(
        {"spec": str(Path(spec_path).resolve()), "targets": list(targets)}, indent=2) + "\n")
    spec = load_spec(spec_path)
    agent = Agent(spec, rd, client, config, progress)
    outcomes, results = [], []
    seen: set[str] = set()
    for t in targets:
        hw = hwmodels.get(t)
        if hw.name in seen:
            continue
        seen.add(hw.name)
        out = agent.run_target(hw.name)
        outcomes.append(out)
        choices = []
        if out.kept is not None:
            sid, verdict, source = out.kept
            for shape in spec.shapes:
                for dtype in spec.dtypes:
                    choices.append(BucketChoice(
                        bucket=shape_bucket(shape), dtype=dtype_name(dtype), shape=tuple(shape),
                        config={"origin": ORIGIN}, source=source, tier=verdict.tier,
                        numbers=({k: v for k, v in verdict.numbers.items()
                                  if k in NUMBER_KEYS} if tuple(shape) == tuple(spec.shapes[0])
                                 else {}) or {"label": "not timed"},
                        origin=ORIGIN))
        tol = "; ".join(f"{dtype_name(d)}: {tolerance(d, hw).describe()}" for d in spec.dtypes)
        results.append(TargetResult(
            target=hw.name, vendor=hw.vendor, backend=hw.build.backend, arch=str(hw.build.arch),
            hw_model_hash=hwmodels.model_hash(hw), tolerance=tol, choices=tuple(choices),
            notes=(f"written by {config.model} (porter --agent claude); {out.stop_reason}",),
            failures=() if choices else (f"no candidate passed: {out.stop_reason}",)))
    example = spec.make_inputs(tuple(spec.smoke_shape), spec.dtypes[0], torch.device("cpu"),
                               torch.Generator().manual_seed(0))
    result = PortResult(
        op=spec.name, spec_path=Path(spec.path), run_dir=rd, targets=tuple(results),
        versions={k: v for k, v in env_info.versions().items() if v is not None},
        fusion={"text": f"written by {config.model} (no template covers the op)",
                "bytes_saved": None},
        signature=input_kinds(tuple(example)),
        reference_function="reference" if spec.source_kind == "spec" else None,
        checks_run=sum(o.candidates for o in outcomes))
    pack_path = None
    packed = replace(result, targets=tuple(t for t in results if t.choices))
    if out_dir is not None and packed.targets:
        pack_path = write_pack(packed, out_dir, replace=replace_pack).path
        result = replace(result, pack_path=pack_path)
    summary = {
        "op": spec.name, "model": config.model,
        "targets": {o.target: {"kept": o.kept[0] if o.kept else None,
                               "tier": o.kept[1].tier if o.kept else "none",
                               "stop_reason": o.stop_reason, "rounds": o.rounds,
                               "candidates_judged": o.candidates} for o in outcomes},
        "usage": client.usage.to_json(config.model),
        "usage_by_role": {r: u.to_json(config.model) for r, u in sorted(client.by_role.items())},
        "device_seconds": round(agent.device_s, 1),
        "pack": str(pack_path) if pack_path else None,
    }
    (rd / "llm" / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return AgentResult(port=result, summary=summary, pack_path=pack_path)


def make_client(config: LLMConfig, run_dir: str | Path, *,
                replay: str | Path | None = None) -> LLMClient:
    """The client of a run: the SDK (recording to `<run>/llm/`), or a replay of a recorded run
    (served with no network and no key; recorded again into this run's folder)."""
    from porter.llm.record import ReplayTransport
    from porter.llm.transport import SDKTransport

    recorder = Recorder(Path(run_dir) / "llm")
    transport: Any = ReplayTransport(replay) if replay is not None else SDKTransport(config)
    return LLMClient(config, transport, recorder)
