"""Rank a model's fused groups by what porting them would gain (Amdahl).

How a group is ranked: share f = the group's time / the model's time; speedup s = its eager
time / the time of one fused kernel moving the group's bytes once
(`harness.projection.project` on the device's hardware model, at OURS_BW_FRACTION of the
measured copy bandwidth, the fraction the porter's kernels reached on every large row of the
H100 suite), or the measured time of an existing pack's kernel for that shape and dtype where
one is given. Expected whole-model speedup = 1 / (1 - f + f / s). Groups with one signature
(the residual add + RMSNorm of every layer) are ranked together: one pack serves them all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx as fx

from porter.model.graph import TracedModel
from porter.model.graph import node_bytes
from porter.model.graph import node_flops
from porter.model.graph import op_name
from porter.model.graph import rows
from porter.model.groups import Group
from porter.model.groups import group_bytes

# The porter's kernels reached >= 90% of the measured copy bandwidth on every row >= 64 MB of the
# H100 suite (README, run18); a fused group is projected at that fraction.
OURS_BW_FRACTION = 0.9


def _meta_d(n: fx.Node) -> dict[str, Any]:
    tm = n.meta["tensor_meta"]
    return {"name": n.name, "shape": list(tm.shape), "dtype": str(tm.dtype).removeprefix("torch.")}


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
