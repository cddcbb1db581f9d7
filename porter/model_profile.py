"""Profile a whole model and rank its fused groups by what porting them would gain (Amdahl).

    model, inputs, source = load_model("examples/llama_block/model.py", size="toy")
    prof = profile_model(model, inputs, source=source, hw_name="h100")
    print(format_profile(prof))          # ops by share, then the ranked groups
    Path("profile.json").write_text(json.dumps(prof, indent=2))

What is timed: the model runs under `torch.profiler` with shapes recorded, executed node by node
through its torch.fx graph (`porter.model_graph`) with one `record_function` range per node, so
every kernel is attributed to the node (and so the fused group) that launched it. On a GPU the
times are device (kernel) times; on a CPU they are CPU times and only indicative, so the ranking
there uses times *projected* for the target device from its hardware model instead, and says so.

How a group is ranked: share f = the group's time / the model's time; speedup s = its eager time /
the time of one fused kernel moving the group's bytes once (`harness.projection.project` on the
device's hardware model, at OURS_BW_FRACTION of the measured copy bandwidth, the fraction the
porter's kernels reached on every large row of the H100 suite), or the measured time of an
existing pack's kernel for that shape and dtype where one is given. Expected whole-model
speedup = 1 / (1 - f + f / s). Groups with one signature (the residual add + RMSNorm of every
layer) are ranked together: one pack serves them all.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from porter.errors import PorterError
from porter.model_graph import Group
from porter.model_graph import ModelTraceError
from porter.model_graph import TracedModel
from porter.model_graph import find_groups
from porter.model_graph import group_bytes
from porter.model_graph import node_bytes
from porter.model_graph import node_flops
from porter.model_graph import op_name
from porter.model_graph import rows
from porter.model_graph import trace_model

log = logging.getLogger(__name__)

PROFILE_FORMAT = 1
# The porter's kernels reached >= 90% of the measured copy bandwidth on every row >= 64 MB of the
# H100 suite (README, run18); a fused group is projected at that fraction.
OURS_BW_FRACTION = 0.9
_NODE_TAG = "porter_node::"
HF_SIZES: dict[str, dict[str, int]] = {
    "toy": {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
            "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 256,
            "batch": 2, "seq": 8},
    "realistic": {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 32000,
                  "batch": 4, "seq": 2048},
}
HF_CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "mistral": "MistralConfig"}


class ModelLoadError(PorterError):
    """A model file or architecture cannot be built; the message says what to do."""


# -- loading -------------------------------------------------------------------------------------
def load_model(path: str | os.PathLike[str], *, size: str | None = None,
               device: str = "cpu") -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Build a KernelBench level-3 style model file (`Model`, `get_inputs`, `get_init_inputs`).

    Args:
        path: the Python file.
        size: passed to `get_init_inputs(size)` / `get_inputs(size)` when they take an argument
            (the example model's "toy" / "realistic").
        device: where the model and its inputs go ("cpu", "cuda").

    Returns:
        (model in eval mode, inputs, source description for the profile).

    Raises:
        ModelLoadError: missing file or names, or a failure building the model.
    """
    from porter.specs.opspec import import_file

    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"{p}: no such file (give a Python file defining Model, get_inputs "
                             "and get_init_inputs)")
    module = import_file(p, tag="model")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ModelLoadError(f"{p}: defines no {', '.join(missing)} (KernelBench level-3 format)")

    def call(fn: Any) -> Any:
        takes = bool(inspect.signature(fn).parameters)
        if size is not None and not takes:
            raise ModelLoadError(f"{p}: {fn.__name__}() takes no size, but --size {size} given")
        return fn(size) if (takes and size is not None) else fn()

    try:
        init = call(module.get_init_inputs)
        model = module.Model(*init)
        inputs = tuple(call(module.get_inputs))
        dtype = call(module.get_dtype) if hasattr(module, "get_dtype") else None
    except ModelLoadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model code, reported in one line
        raise ModelLoadError(f"{p}: building the model failed: {type(exc).__name__}: "
                             f"{exc}") from None
    if dtype is None:
        dtype = next((t.dtype for t in inputs if isinstance(t, torch.Tensor)
                      and t.is_floating_point()), torch.float32)
    model = model.to(device=device, dtype=dtype).eval()
    inputs = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs)
    return model, inputs, {"kind": "file", "path": str(p), "size": size,
                           "dtype": str(dtype).removeprefix("torch.")}


def build_hf(arch: str, *, size: str = "toy", device: str = "cpu",
             dtype: torch.dtype | None = None,
             ) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """A Hugging Face causal LM built from its config with random weights (nothing downloaded).

    Raises:
        ModelLoadError: transformers is not installed, or the architecture/size is unknown.
    """
    try:
        import transformers
    except ImportError:
        raise ModelLoadError("--hf needs the transformers package: pip install "
                             "'kernel-porter[models]'") from None
    if arch not in HF_CONFIGS:
        raise ModelLoadError(f"unknown --hf architecture {arch!r}; choose from "
                             f"{', '.join(sorted(HF_CONFIGS))}")
    if size not in HF_SIZES:
        raise ModelLoadError(f"unknown --size {size!r}; choose from {', '.join(HF_SIZES)}")
    s = dict(HF_SIZES[size])
    batch, seq = s.pop("batch"), s.pop("seq")
    cfg = getattr(transformers, HF_CONFIGS[arch])(**s, max_position_embeddings=max(seq, 128))
    cfg._attn_implementation = "sdpa"
    lm = transformers.AutoModelForCausalLM.from_config(cfg)
    dtype = dtype or (torch.bfloat16 if size == "realistic" else torch.float32)
    model = CausalLMLogits(lm).to(device=device, dtype=dtype).eval()
    ids = torch.randint(0, s["vocab_size"], (batch, seq), device=device)
    return model, (ids,), {"kind": "hf", "arch": arch, "size": size,
                           "dtype": str(dtype).removeprefix("torch."),
                           "transformers": transformers.__version__}


def trace_any(model: torch.nn.Module, inputs: Sequence[Any], source: dict[str, Any]) -> TracedModel:
    """The model's fx graph at torch-op level: torch.fx's tracer, else TorchDynamo's export.

    torch.fx traces modules through (and keeps Linear and activation modules whole); a model it
    cannot trace (a Hugging Face model: masks built under vmap, caches) is captured by
    `torch._dynamo.export`, one graph with the parameters as attributes.

    Raises:
        ModelTraceError: neither can capture the model as one graph.
    """
    if source.get("kind") != "hf":
        try:
            return trace_model(model, inputs)
        except ModelTraceError as exc:
            first = str(exc)
    else:
        first = ""
    try:
        with torch.no_grad():
            gm, _ = torch._dynamo.export(model)(*inputs)
    except Exception as exc:  # noqa: BLE001 - reported in one line with the fx failure
        why = f"torch._dynamo.export cannot capture it as one graph: {type(exc).__name__}: " \
              f"{str(exc).splitlines()[0] if str(exc) else ''}"
        raise ModelTraceError(f"{first}; {why}" if first else why) from None
    from torch.fx.passes.shape_prop import ShapeProp

    with torch.no_grad():
        ShapeProp(gm).propagate(*inputs)
    return TracedModel(gm, tuple(inputs))


class CausalLMLogits(torch.nn.Module):
    """A Hugging Face causal LM called as `model(input_ids) -> logits`, no cache: one graph."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


# -- profiling -----------------------------------------------------------------------------------
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
                  matmul_epilogues: bool = False) -> dict[str, Any]:
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
            (`porter.model_graph.find_groups`).

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
    return prof_d


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


def _meta_d(n: fx.Node) -> dict[str, Any]:
    tm = n.meta["tensor_meta"]
    return {"name": n.name, "shape": list(tm.shape), "dtype": str(tm.dtype).removeprefix("torch.")}


# -- ranking -------------------------------------------------------------------------------------
def amdahl(f: float, s: float) -> float:
    """Whole-model speedup when a part taking share f of the time gets s times faster."""
    if s <= 0:
        raise ValueError(f"amdahl: speedup must be positive, got {s}")
    return 1.0 / (1.0 - f + f / s)


def _project_ms(bytes_: int, flops: int, hw: Any, dtype: torch.dtype, grid: int,
                bw_fraction: float = 1.0) -> float:
    from harness.projection import project

    if not dtype.is_floating_point or dtype == torch.float64:
        dtype = torch.float32  # indices, masks: only their bytes matter (no FLOPs here)
    p = project(int(bytes_), int(flops), hw, dtype, grid=max(1, grid),
                math_unit="matrix" if flops else "simt")
    return p.breakdown["throughput_ms"] / bw_fraction + p.breakdown["launch_ms"]


def _node_dtype(n: fx.Node) -> torch.dtype:
    tm = n.meta.get("tensor_meta")
    return tm.dtype if tm is not None else torch.float32


def _eager_projection(gm: fx.GraphModule, g: Group, hw: Any) -> float:
    """Eager time of a group on `hw`: each node one kernel moving its inputs and output."""
    total = 0.0
    for n in g.nodes:
        if g.kind == "opaque" and op_name(gm, n) in ("view", "reshape", "transpose"):
            continue
        b = node_bytes(n) + sum(node_bytes(a) for a in n.all_input_nodes)
        total += _project_ms(b, node_flops(gm, n), hw, _node_dtype(n), rows(n))
    return total


def _ours_projection(gm: fx.GraphModule, g: Group, hw: Any) -> float:
    _, fused = group_bytes(g)
    out = g.outputs[0]
    flops = sum(node_flops(gm, n) for n in g.nodes)
    return _project_ms(fused, flops, hw, _node_dtype(out), rows(out), OURS_BW_FRACTION)


def rank_groups(traced: TracedModel, groups: list[Group], node_ms: dict[str, float], hw: Any, *,
                measured: bool, packs: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Share, estimated speedup and Amdahl gain per group signature, best first.

    Args:
        traced: the traced model (shapes per node).
        groups: `find_groups(traced)`.
        node_ms: measured time per fx node name (from the profile).
        hw: the device's hardware model.
        measured: True when `node_ms` are device times (a GPU profile): shares and eager times
            are measured; False: both are projected for `hw`.
        packs: a packs folder whose measured numbers replace the projection of "ours".

    Returns:
        {"groups": [...], "not_portable": [...], "basis": "..."} as plain data.
    """
    gm = traced.module
    eager: dict[int, float] = {}
    for g in groups:
        if measured:
            eager[g.index] = sum(node_ms.get(n.name, 0.0) for n in g.nodes)
        else:
            eager[g.index] = _eager_projection(gm, g, hw)
    if measured:
        total = sum(node_ms.values())
    else:
        total = sum(eager.values())
    total = total or 1.0
    by_sig: dict[str, dict[str, Any]] = {}
    not_portable: dict[str, dict[str, Any]] = {}
    for g in groups:
        if g.kind != "fused":
            key = g.label if g.kind == "opaque" else "matmul"
            e = not_portable.setdefault(key, {"op": key, "reason": g.reason, "count": 0,
                                              "ms": 0.0})
            e["count"] += 1
            e["ms"] += eager[g.index]
            continue
        ours = _ours_projection(gm, g, hw)
        ours_label = "projected"
        pack_ms = _pack_time(packs, g, hw) if packs else None
        if pack_ms is not None:
            ours, ours_label = pack_ms, "measured pack"
        e = by_sig.setdefault(g.signature, {
            "pack_name": g.pack_name, "label": g.label, "signature": g.signature,
            "code": g.code, "ops": g.ops, "instances": [], "eager_ms": 0.0, "ours_ms": 0.0,
            "ours_label": ours_label})
        unfused, fused = group_bytes(g)
        shapes = g.input_shapes()
        e["instances"].append({"index": g.index, "nodes": [n.name for n in g.nodes],
                               "inputs": [{"name": i.name, "shape": list(shape),
                                           "dtype": _meta_d(i)["dtype"]}
                                          for i, shape in zip(g.inputs, shapes, strict=True)],
                               "outputs": [_meta_d(o) for o in g.outputs],
                               "eager_ms": eager[g.index], "ours_ms": ours,
                               "bytes_unfused": unfused, "bytes_fused": fused})
        e["eager_ms"] += eager[g.index]
        e["ours_ms"] += ours
    ranked = []
    for e in by_sig.values():
        f = e["eager_ms"] / total
        family, why_not = generator_family(e)
        if family is None:
            # the generator cannot take it: listed with the ops the porter cannot take
            key = e["pack_name"]
            entry = not_portable.setdefault(key, {"op": key, "reason": why_not, "count": 0,
                                                  "ms": 0.0})
            entry["count"] += len(e["instances"])
            entry["ms"] += e["eager_ms"]
            continue
        s = max(1.0, e["eager_ms"] / e["ours_ms"]) if e["ours_ms"] > 0 else 1.0
        e.update(share=f, speedup=s, gain=amdahl(f, s), family=family)
        ranked.append(e)
    ranked.sort(key=lambda e: -e["gain"])
    np_list = sorted(not_portable.values(), key=lambda e: -e["ms"])
    for e in np_list:
        e["share"] = e["ms"] / total
    basis = ("measured device time per group (profiler); s from the hardware model's roofline"
             if measured else
             f"eager and fused times projected for {hw.name} from its hardware model")
    return {"groups": ranked, "not_portable": np_list, "basis": basis, "total_basis_ms": total}


def generator_family(group: dict[str, Any]) -> tuple[str | None, str]:
    """(template family, "") when the porter's generator takes the group, else (None, why).

    The group's spec is written as `porter port-profile` writes it, loaded, and generated at
    its smoke shape: exactly what a port of it would start from.
    """
    import tempfile

    from porter.codegen import generate
    from porter.errors import PorterError
    from porter.from_profile import spec_source
    from porter.specs import load_spec

    with tempfile.TemporaryDirectory(prefix="porter_group_") as tmp:
        path = Path(tmp) / f"{group['pack_name']}.py"
        path.write_text(spec_source(group))
        try:
            spec = load_spec(path)
            gen = torch.Generator().manual_seed(0)
            example = spec.make_inputs(spec.smoke_shape, torch.float32, torch.device("cpu"), gen)
            op = generate(spec.reference, tuple(example), name=spec.name)
        except PorterError as exc:
            return None, f"the generator cannot take it: {exc}"
        except Exception as exc:  # noqa: BLE001 - tracing the group's code; reported per group
            return None, f"the generator cannot take it: {type(exc).__name__}: {exc}"
    return str(getattr(op, "family", None) or _family(group["code"])), ""


def _family(code: str) -> str:
    """The template family the porter's generator will use for a group's code (a guess from
    the code, where the generated op does not say)."""
    if "linear(" in code:
        return "matmul_epilogue"
    reduction = any(f".{r}(" in code or f"functional.{r}(" in code or f"torch.{r}(" in code
                    for r in ("mean", "sum", "amax", "softmax", "log_softmax", "rms_norm",
                              "layer_norm", "var", "norm"))
    return "rowwise" if reduction else "elementwise"


def _pack_time(packs: str | os.PathLike[str], g: Group, hw: Any) -> float | None:
    """The measured time of a pack's kernel for this group's shape and dtype, or None."""
    import yaml

    from porter.packs.format import shape_bucket

    manifest = Path(packs) / g.pack_name / "manifest.yaml"
    if not manifest.is_file():
        return None
    data = yaml.safe_load(manifest.read_text())
    first = g.inputs[0].meta["tensor_meta"]
    bucket = shape_bucket(first.shape)
    dname = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}.get(first.dtype)
    for entry in data.get("entries", []):
        if entry.get("target") != hw.name:
            continue
        for b in entry.get("buckets", []):
            n = b.get("numbers") or {}
            if (b.get("bucket") == bucket and b.get("dtype") == dname and n.get("time_ms")
                    and n.get("label") == "measured"):
                return float(n["time_ms"])
    return None


def combined_gain(groups: Sequence[dict[str, Any]]) -> float:
    """Amdahl over several disjoint groups: 1 / (1 - sum f + sum f / s)."""
    f = sum(g["share"] for g in groups)
    return 1.0 / (1.0 - f + sum(g["share"] / g["speedup"] for g in groups))


# -- output --------------------------------------------------------------------------------------
def format_profile(prof: dict[str, Any], *, top_ops: int = 15) -> str:
    """The profile as text: ops by share, the ranked groups, what the porter cannot take."""
    from tabulate import tabulate

    lines = [f"model {prof['model']} on {prof['device']} ({prof['clock']} time per forward, "
             f"{prof['steps']} passes profiled); ranking for {prof['hw']}"]
    lines += [f"note: {n}" for n in prof.get("notes", [])]
    label = "share of device time" if prof["clock"] == "device" else \
        "share of CPU time (indicative only)"
    rows_ = [[o["op"], o["shapes"][:60], o["calls"], f"{o['ms']:.3f}", f"{100 * o['share']:.1f}%"]
             for o in prof["ops"][:top_ops]]
    lines += ["", f"ops by {label}:",
              tabulate(rows_, headers=["op", "input shapes", "calls", "ms", "share"])]
    if prof.get("groups"):
        lines += ["", f"fused groups the porter can take, by expected whole-model gain "
                      f"({prof.get('basis', '')}):"]
        rows_ = []
        for i, g in enumerate(prof["groups"], 1):
            shapes = sorted({"x".join(map(str, inst["inputs"][0]["shape"])) for inst in
                             g["instances"]})
            rows_.append([i, g["pack_name"], g["family"], len(g["instances"]), ", ".join(shapes),
                          f"{100 * g['share']:.1f}%", f"{g['speedup']:.2f}x ({g['ours_label']})",
                          f"{g['gain']:.3f}x"])
        lines.append(tabulate(rows_, headers=["#", "group (pack)", "family", "instances",
                                              "first input", "share f", "est. s",
                                              "end-to-end 1/(1-f+f/s)"]))
        top = prof["groups"]
        lines.append(f"all {len(top)} groups together: {combined_gain(top):.3f}x expected "
                     "end to end")
    if prof.get("not_portable"):
        lines += ["", "not taken by the porter:"]
        rows_ = [[e["op"], e["count"], f"{100 * e['share']:.1f}%", e["reason"]]
                 for e in prof["not_portable"]]
        lines.append(tabulate(rows_, headers=["op", "count", "share", "why"],
                              maxcolwidths=[None, None, None, 70]))
    return "\n".join(lines)


def save_profile(prof: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(prof, indent=2) + "\n")
    return p


def read_profile(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Raises ModelLoadError for a missing or malformed profile file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"{p}: not a profile written by `porter profile --out` "
                             f"({exc})") from None
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT or "groups" not in data:
        raise ModelLoadError(f"{p}: not a profile written by `porter profile --out` "
                             f"(format {PROFILE_FORMAT})")
    return data


__all__ = ["ModelLoadError", "amdahl", "build_hf", "combined_gain", "format_profile",
           "load_model", "profile_model", "rank_groups", "read_profile", "save_profile"]
