"""Profile a whole model and rank its fused groups by what porting them would gain (Amdahl).

    model, inputs, source = load_model("examples/llama_block/model.py", size="toy")
    prof = profile_model(model, inputs, source=source, hw_name="h100")
    print(format_profile(prof))          # ops by share, then the ranked groups
    Path("profile.json").write_text(json.dumps(prof, indent=2))

What is timed: the model runs under `torch.profiler` with shapes recorded, executed node by node
through its torch.fx graph (`porter.model.graph`) with one `record_function` range per node, so
every kernel is attributed to the node (and so the fused group) that launched it. On a GPU the
times are device (kernel) times; on a CPU they are CPU times and only indicative, so the ranking
there uses times *projected* for the target device from its hardware model instead, and says so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx

from porter.model.graph import ModelTraceError
from porter.model.graph import TracedModel
from porter.model.groups import find_groups
from porter.model.load import trace_any
from porter.model.rank import rank_groups
from porter.model.report import PROFILE_FORMAT

_NODE_TAG = "porter_node::"


class _Annotated(fx.Interpreter):
    """Runs the graph node by node, each inside a profiler range named after the node."""

    def run_node(self, n: fx.Node) -> Any:
        if n.op in ("placeholder", "output", "get_attr"):
            return super().run_node(n)
        with torch.profiler.record_function(_NODE_TAG + n.name):
            return super().run_node(n)


def _device_us(evt: Any, on_gpu: bool, self_only: bool) -> float:
    if on_gpu:
        names = (("self_device_time_total", "self_cuda_time_total") if self_only
                 else ("device_time_total", "cuda_time_total"))
    else:
        names = ("self_cpu_time_total",) if self_only else ("cpu_time_total",)
    for name in names:
        v = getattr(evt, name, None)
        if v is not None:
            return float(v)
    return 0.0


def profile_model(model: torch.nn.Module, inputs: Sequence[Any], *, source: dict[str, Any],
                  hw_name: str | None = None, steps: int = 3, warmup: int = 2,
                  packs: str | os.PathLike[str] | None = None,
                  matmul_epilogues: bool = False, in_place: bool = False) -> dict[str, Any]:
    """Profile `model(*inputs)` and rank its groups; returns the profile as plain data (JSON).

    Args:
        model: the model (eval mode, on its device).
        inputs: its inputs.
        source: how it was built (`load_model` / `build_hf`), stored for `--from-profile`.
        hw_name: the hardware model to project for; None: the detected GPU, else h100.
        steps: profiled forward passes (times are per pass).
        warmup: forward passes before profiling.
        packs: a packs folder; a group whose pack is there with a measured number for its
            shape and dtype takes s from it.
        matmul_epilogues: absorb a Linear into the elementwise group that alone reads it
            (`porter.model.groups.find_groups`).
        in_place: rank the groups an in-place patch can replace (`porter.model.inplace`):
            each patchable module traced on its own, its groups timed there, their shares
            taken of the whole model's time. Matmul epilogues are absorbed.

    Returns:
        A dict: device, versions, ops (by share), groups (ranked), not_portable, notes.
    """
    import hwmodels
    from harness import env_info

    first = next((t for t in inputs if isinstance(t, torch.Tensor)), None)
    on_gpu = first is not None and first.device.type == "cuda"
    if hw_name is None:
        det = hwmodels.detect() if on_gpu else None
        hw_name = det.model.name if det is not None and det.model is not None else "h100"
    hw = hwmodels.get(hw_name)
    notes: list[str] = []
    try:
        traced: TracedModel | None = trace_any(model, inputs, source)
    except ModelTraceError as exc:
        traced = None
        notes.append(f"{exc}; ops are listed, but no groups can be formed")
    if traced is not None:
        runner = lambda: _Annotated(traced.module).run(*inputs)  # noqa: E731
    else:
        runner = lambda: model(*inputs)  # noqa: E731
    acts = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad():
        for _ in range(warmup):
            runner()
        if on_gpu:
            torch.cuda.synchronize()
        with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
            for _ in range(steps):
                runner()
            if on_gpu:
                torch.cuda.synchronize()
    clock = "device" if on_gpu else "cpu"
    ops = _op_table(prof, on_gpu, steps)
    node_ms = _node_times(prof, on_gpu, steps)
    total_ms = sum(node_ms.values()) if node_ms else sum(o["ms"] for o in ops)
    if not on_gpu:
        notes.append("profiled on a CPU: the op shares below are CPU time, indicative only; "
                     f"the ranking uses times projected for {hw.name} from its hardware model")
    prof_d: dict[str, Any] = {
        "format": PROFILE_FORMAT, "source": source, "model": type(model).__name__,
        "device": torch.cuda.get_device_name() if on_gpu else "cpu", "clock": clock,
        "hw": hw.name, "steps": steps, "total_ms": total_ms, "ops": ops, "notes": notes,
        "versions": {k: v for k, v in env_info.versions().items() if v is not None},
        "inputs": [_tensor_d(t) for t in inputs if isinstance(t, torch.Tensor)],
    }
    if traced is None:
        prof_d["groups"], prof_d["not_portable"] = [], []
        return prof_d
    measured = on_gpu
    if on_gpu and not any(node_ms.values()):
        # the profiler attributed no kernel to the per-node ranges: rank on projections instead
        measured = False
        notes.append("the profiler attributed no device time to the model's nodes; the ranking "
                     f"uses times projected for {hw.name}")
    groups = find_groups(traced, matmul_epilogues=matmul_epilogues)
    prof_d["matmul_epilogues"] = matmul_epilogues
    prof_d.update(rank_groups(traced, groups, node_ms, hw, measured=measured, packs=packs))
    if in_place:
        prof_d["granularity"] = "modules"
        prof_d["matmul_epilogues"] = True
        prof_d["groups"] = _module_groups(model, inputs, hw, measured, prof_d["total_basis_ms"],
                                          packs, steps, warmup)
        notes.append("groups are the in-place patch's: each patchable module (an RMSNorm, an "
                     "MLP) traced on its own; shares are of the whole model's time")
    return prof_d


def _module_groups(model: torch.nn.Module, inputs: Sequence[Any], hw: Any, measured: bool,
                   total_ms: float, packs: str | os.PathLike[str] | None, steps: int,
                   warmup: int) -> list[dict[str, Any]]:
    """The groups of every module an in-place patch can take, ranked by gain: one module of
    each class and call shape is traced, timed (GPU) or projected, and counts for all."""
    from porter.model.inplace import module_calls
    from porter.model.inplace import trace_module
    from porter.model.rank import amdahl

    alike: dict[tuple[Any, ...], list[Any]] = {}
    for c in module_calls(model, inputs):
        key = (type(c.module), tuple((tuple(a.shape), a.dtype) for a in c.args))
        alike.setdefault(key, []).append(c)
    merged: dict[str, dict[str, Any]] = {}
    for calls in alike.values():
        tm = trace_module(calls[0])
        if tm.traced is None or not any(g.kind == "fused" for g in tm.groups):
            continue
        node_ms = _node_ms(tm.traced, tm.call.args, measured, steps, warmup) if measured else {}
        ranked = rank_groups(tm.traced, tm.groups, node_ms, hw, measured=measured, packs=packs)
        for e in ranked["groups"]:
            one = e["instances"]
            m = merged.setdefault(e["signature"], {**e, "instances": [], "eager_ms": 0.0,
                                                   "ours_ms": 0.0, "modules": []})
            for c in calls:
                m["instances"] += [{**i, "module": c.name} for i in one]
                m["modules"].append(c.name)
                m["eager_ms"] += sum(i["eager_ms"] for i in one)
                m["ours_ms"] += sum(i["ours_ms"] for i in one)
    out = []
    for e in merged.values():
        e["share"] = e["eager_ms"] / (total_ms or 1.0)
        e["speedup"] = max(1.0, e["eager_ms"] / e["ours_ms"]) if e["ours_ms"] > 0 else 1.0
        e["gain"] = amdahl(min(e["share"], 1.0), e["speedup"])
        out.append(e)
    return sorted(out, key=lambda e: -e["gain"])


def _node_ms(traced: TracedModel, inputs: Sequence[Any], on_gpu: bool, steps: int,
             warmup: int) -> dict[str, float]:
    """ms per pass of each fx node of `traced` run alone on `inputs` (profiler ranges)."""
    acts = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.no_grad():
        for _ in range(warmup):
            _Annotated(traced.module).run(*inputs)
        if on_gpu:
            torch.cuda.synchronize()
        with torch.profiler.profile(activities=acts) as prof:
            for _ in range(steps):
                _Annotated(traced.module).run(*inputs)
            if on_gpu:
                torch.cuda.synchronize()
    return _node_times(prof, on_gpu, steps)


def _op_table(prof: Any, on_gpu: bool, steps: int) -> list[dict[str, Any]]:
    rows_: list[dict[str, Any]] = []
    for evt in prof.key_averages(group_by_input_shape=True):
        if evt.key.startswith(_NODE_TAG) or evt.key.startswith("ProfilerStep"):
            continue
        if on_gpu and str(getattr(evt, "device_type", "")).endswith("CUDA"):
            continue  # kernels: their time is counted on the op that launched them
        us = _device_us(evt, on_gpu, self_only=True)
        if us <= 0:
            continue
        rows_.append({"op": evt.key, "shapes": str(evt.input_shapes)[:120],
                      "calls": evt.count // steps, "ms": us / 1e3 / steps})
    total = sum(r["ms"] for r in rows_) or 1.0
    for r in rows_:
        r["share"] = r["ms"] / total
    rows_.sort(key=lambda r: -r["ms"])
    return rows_


def _node_times(prof: Any, on_gpu: bool, steps: int) -> dict[str, float]:
    """ms per profiled pass of each fx node's range (device time on a GPU, else CPU time)."""
    out: dict[str, float] = {}
    for evt in prof.events():
        if not evt.name.startswith(_NODE_TAG):
            continue
        if on_gpu and str(getattr(evt, "device_type", "")).endswith("CUDA"):
            continue  # the GPU-side copy of the annotation; the CPU range carries the kernels
        name = evt.name[len(_NODE_TAG):]
        out[name] = out.get(name, 0.0) + _device_us(evt, on_gpu, self_only=False) / 1e3 / steps
    return out


def _tensor_d(t: torch.Tensor) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
