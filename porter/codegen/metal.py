"""Metal Shading Language emission for the elementwise and rowwise families.

Code emission only: no Metal compiler exists on the machines this runs on, so the source is
never compiled here and every file says so in its header.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any

import torch

from porter.codegen import rowwise
from porter.codegen.emit import METAL_DTYPE
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.emit import KernelArgs
from porter.codegen.ir import Node
from porter.codegen.templates import ENV
from porter.codegen.templates import safe_name

if TYPE_CHECKING:
    from porter.codegen.op import GeneratedOp

_IDENT = {"sum": "0.0f", "max": "(-INFINITY)", "min": "INFINITY"}
_COMB = {"sum": "{a} + {b}", "max": "fmax({a}, {b})", "min": "fmin({a}, {b})"}
_OPCODE = {"sum": 0, "max": 1, "min": 2}
_DT = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _param_decl(name: str, kind: str, io: torch.dtype, op: GeneratedOp) -> str:
    if kind.startswith("ptr:in"):
        k = int(kind[6:])
        dt = op.example_inputs[k].dtype
        dt = io if dt.is_floating_point else dt
        return f"device const {METAL_DTYPE[dt]}* in{k}"
    if kind.startswith("ptr:out"):
        j = int(kind[7:])
        dt = op.graph.outputs[j].dtype
        dt = io if dt.is_floating_point else dt
        return f"device {METAL_DTYPE[dt]}* out{j}"
    if kind.startswith("ptr:tmp"):
        return f"device float* tmp{kind[7:]}"
    return f"constant long& {name}"


def render(op: GeneratedOp, config: dict[str, Any]) -> str:
    """Metal source for `op` with `config` ({"threads": 256, "dtype": "bf16"} optional)."""

    io = _DT.get(config.get("dtype", ""), None)
    if io is None:
        io = next(x.dtype for x in op.example_inputs
                  if isinstance(x, torch.Tensor) and x.dtype.is_floating_point)
    g = op.graph
    args = KernelArgs(g.symbols)
    common = {"name": op.name, "family": op.family, "fused_ops": list(op.fusion.ops),
              "kname": "porter_" + safe_name(op.name)}
    if op.plan is None:
        em = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
        em.flat = True
        coords = tuple(Coord("offs", True) for _ in g.outputs[0].shape)
        for j, o in enumerate(g.outputs):
            val = em.eval(o, coords)
            args.output_ptr(j)
            em.emit(f"out{j}[offs] = {_cast(o, io)}({val});")
        params = [_param_decl(p, k, io, op) for p, k in zip(args.params, args.kinds, strict=True)]
        return ENV.get_template("metal_elementwise.metal.j2").render(
            **common, params=params, body=em.lines)
    plan = op.plan
    em = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
    coord_lines, rc = rowwise._row_coords(plan, args, dialect="metal")
    em.row_coords, em.row_sizes, em.reduce_dim = rc, plan.row_shape, plan.dim
    full = list(rc)
    full.insert(plan.dim, Coord("c", True))
    full_t = tuple(full)
    for r in plan.main:
        kind = r.attrs["kind"]
        em.emit(f"float acc{r.id} = {_IDENT[kind]};")
        em.emit("for (long c = tid; c < n_cols; c += THREADS) {")
        em.indent += 1
        em.reset()
        v = em.eval(r.args[0], full_t)
        em.emit(f"acc{r.id} = " + _COMB[kind].format(a=f"acc{r.id}", b=f"(float)({v})") + ";")
        em.indent -= 1
        em.reset()
        em.emit("}")
        em.emit(f"float red{r.id} = porter_reduce(acc{r.id}, scratch, tid, {_OPCODE[kind]});")
        em.reduced[r.id] = f"red{r.id}"
    outs = list(zip(g.outputs, plan.out_kind, strict=True))
    if "full" in plan.out_kind:
        em.emit("for (long c = tid; c < n_cols; c += THREADS) {")
        em.indent += 1
        for j, (o, kind) in enumerate(outs):
            if kind == "full":
                _store(em, args, j, o, full_t, io)
        em.indent -= 1
        em.reset()
        em.emit("}")
    em.emit("if (tid == 0) {")
    em.indent += 1
    for j, (o, kind) in enumerate(outs):
        if kind == "row":
            _store(em, args, j, o, rowwise._coords_for(plan, o, rc), io)
    for i, p in enumerate(plan.post):
        x = p.args[0]
        val = em.eval(x, rowwise._coords_for(plan, x, rc))
        args.add(f"tmp{i}", "", f"ptr:tmp{i}")
        em.emit(f"tmp{i}[rows] = (float)({val});")
    em.indent -= 1
    em.emit("}")
    body = em.lines
    post_note = []
    if plan.post:
        # The scalar epilogue (e.g. the mean over rows of cross-entropy) runs as a second
        # dispatch of one threadgroup; it is written out as a comment-free second kernel.
        pem = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
        for i, p in enumerate(plan.post):
            kind = p.attrs["kind"]
            pem.emit(f"float pacc{i} = {_IDENT[kind]};")
            pem.emit(f"for (long r = tid; r < n_rows; r += THREADS) pacc{i} = "
                     + _COMB[kind].format(a=f"pacc{i}", b=f"tmp{i}[r]") + ";")
            pem.emit(f"float total{i} = porter_reduce(pacc{i}, scratch, tid, {_OPCODE[kind]});")
            pem.reduced[p.id] = f"total{i}"
        pem.emit("if (tid == 0) {")
        pem.indent += 1
        for j, (o, kind) in enumerate(outs):
            if kind == "scalar":
                val = pem.eval(o, ())
                args.output_ptr(j)
                pem.emit(f"out{j}[0] = {_cast(o, io)}({val});")
        pem.indent -= 1
        pem.emit("}")
        post_note = pem.lines
    params = [_param_decl(p, k, io, op) for p, k in zip(args.params, args.kinds, strict=True)]
    src = ENV.get_template("metal_rowwise.metal.j2").render(
        **common, params=params, body=body, row_coord_lines=coord_lines,
        threads=int(config.get("threads", 256)))
    if post_note:
        src += "\n" + "\n".join([
            f"kernel void {common['kname']}_post(",
            *[f"    {p} [[buffer({i})]]," for i, p in enumerate(params)],
            f"    constant long& n_rows [[buffer({len(params)})]],",
            "    uint tid [[thread_position_in_threadgroup]])",
            "{",
            "    threadgroup float scratch[THREADS];",
            *post_note,
            "}", ""])
    return src


def _cast(o: Node, io: torch.dtype) -> str:
    dt = o.dtype if not o.dtype.is_floating_point else io
    return f"({METAL_DTYPE[dt]})"


def _store(em: Emitter, args: KernelArgs, j: int, o: Node, coords: tuple[Coord, ...],
           io: torch.dtype) -> None:
    if o.op == "reshape" and len(coords) != o.rank:
        # a flattened row split back into its dims (multi-dim layer norm): value at the row's
        # coordinates, address through the split ones
        val = em.eval(o.args[0], coords)
        coords = em.reshape_coords(coords, o.args[0].shape, o.shape)
    else:
        val = em.eval(o, coords)
    args.output_ptr(j)
    terms = [f"{c.expr} * {args.output_stride(j, d)}"
             for d, (c, s) in enumerate(zip(coords, o.shape, strict=True))
             if s != 1 and c.expr != "0"]
    em.emit(f"out{j}[{' + '.join(terms) or '0'}] = {_cast(o, io)}({val});")


