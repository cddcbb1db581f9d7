"""Metal source for each family: elementwise (a flat range per thread), rowwise (one row per
threadgroup or per SIMD-group, reductions in registers) and matmul with an epilogue
(`simdgroup_float8x8`), each rendered through its template with the dispatch embedded."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING
from typing import Any

import sympy
import torch

from porter.codegen import rowwise
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.errors import UnsupportedOpError
from porter.codegen.ir import Node
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python
from porter.codegen.metal.config import MetalConfig
from porter.codegen.metal.dispatch import Signature
from porter.codegen.metal.dispatch import make_dispatch
from porter.codegen.metal.vectorise import flat_vectorise
from porter.codegen.metal.vectorise import row_loop
from porter.codegen.metal.vectorise import vec_ok_expr
from porter.codegen.spellings import METAL_DTYPE
from porter.codegen.templates import ENV
from porter.codegen.templates import safe_name
from targets.dtypes import FLOAT_NAMES
from targets.dtypes import torch_dtype

if TYPE_CHECKING:
    from porter.codegen.op import GeneratedOp

_IDENT = {"sum": "0.0f", "max": "(-INFINITY)", "min": "INFINITY"}
_COMB = {"sum": "{a} + {b}", "max": "fmax({a}, {b})", "min": "fmin({a}, {b})"}
_OPCODE = {"sum": 0, "max": 1, "min": 2}


def render(op: GeneratedOp, config: dict[str, Any]) -> str:
    """Metal source for `op` with `config` (MetalConfig keys, plus "dtype"), dispatch embedded."""
    return _render(op, config)[0]


def dispatch_of(op: GeneratedOp, config: dict[str, Any]) -> dict[str, Any]:
    """The dispatch description embedded in `render(op, config)`."""
    return _render(op, config)[1]


def _render(op: GeneratedOp, config: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    cfg = MetalConfig.of(config)
    io = _io_dtype(op, config)
    g = op.graph
    args = KernelArgs(g.symbols)
    kname = "porter_" + safe_name(op.name)
    common = {"name": op.name, "family": op.family, "fused_ops": list(op.fusion.ops),
              "kname": kname, "vec": cfg.vec, "index_bits": cfg.index_bits}
    sig = Signature(op, io)
    vec_terms: list[str] = []
    if op.family == "matmul_epilogue":
        return _render_matmul(op, cfg, io, args, sig, common)
    if op.plan is None:
        body, numel = _flat_body(op, args, io, cfg.vec)
        sig.from_args(args)
        types = {b["name"]: b["type"] for b in sig.buffers if b["role"] != "scalar"}
        body = flat_vectorise(body, cfg.vec, types, vec_terms, numel)
        sig.scalar("n_elements", numel)
        if cfg.vec > 1:
            sig.scalar("vec_ok", vec_ok_expr(vec_terms, numel, cfg.vec))
        threads = cfg.threads
        disp = make_dispatch(kname, sig, cfg, io, sizes={"n_elements": numel},
                             grid=f"-(-n_elements // {cfg.vec * threads})", threads=threads)
        src = ENV.get_template("metal_elementwise.metal.j2").render(
            **common, params=sig.params, scalar_lines=sig.scalar_lines, body=body,
            dispatch_json=json.dumps(disp, sort_keys=True))
        return src, disp
    return _render_rowwise(op, cfg, io, args, sig, common, vec_terms)


def _flat_body(op: GeneratedOp, args: KernelArgs, io: torch.dtype,
               vec: int) -> tuple[list[str], str]:
    g = op.graph
    em = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
    em.flat = True
    coords = tuple(Coord("offs", True) for _ in g.outputs[0].shape)
    for j, o in enumerate(g.outputs):
        val = em.eval(o, coords)
        args.output_ptr(j)
        em.emit(f"out{j}[offs] = {_cast(o, io)}({val});")
    numel = sym_to_python(sympy.Mul(*g.outputs[0].shape), g.symbols)
    return em.lines, numel


def _io_dtype(op: GeneratedOp, config: dict[str, Any]) -> torch.dtype:
    io = torch_dtype(config["dtype"]) if config.get("dtype") in FLOAT_NAMES else None
    if io is None:
        io = next(x.dtype for x in op.example_inputs
                  if isinstance(x, torch.Tensor) and x.dtype.is_floating_point)
    return io


def _render_rowwise(op: GeneratedOp, cfg: MetalConfig, io: torch.dtype, args: KernelArgs,
                    sig: Signature, common: dict[str, Any],
                    vec_terms: list[str]) -> tuple[str, dict[str, Any]]:
    g = op.graph
    plan = op.plan
    assert plan is not None
    arg = next((r for r in plan.main if r.attrs["kind"] in ("argmax", "argmin")), None)
    if arg is not None:
        raise UnsupportedOpError(arg.origin, f"{arg.attrs['kind']} has no Metal template (the "
                                 "Triton row kernels cover it)")
    em = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
    coord_lines, rc = rowwise.row_coords(plan, args, dialect="metal")
    coord_lines = [re.sub(r"^long ", "const idx_t ", ln) for ln in coord_lines]
    em.row_coords, em.row_sizes, em.reduce_dim = rc, plan.row_shape, plan.dim
    full = list(rc)
    full.insert(plan.dim, Coord("c", True))
    full_t = tuple(full)
    reduce_fn = "porter_tg_reduce<{op}>({v}, part, lane, sg)" if cfg.rows == 1 else \
        "porter_simd_reduce<{op}>({v})"
    loops: list[tuple[int, int]] = []  # (start, end) of loop bodies in em.lines
    for r in plan.main:
        kind = r.attrs["kind"]
        em.emit(f"float acc{r.id} = {_IDENT[kind]};")
        start = len(em.lines)
        em.reset()
        v = em.eval(r.args[0], full_t)
        em.emit(f"acc{r.id} = " + _COMB[kind].format(a=f"acc{r.id}", b=f"(float)({v})") + ";")
        em.reset()
        loops.append((start, len(em.lines)))
        em.emit(f"float red{r.id} = " + reduce_fn.format(op=_OPCODE[kind], v=f"acc{r.id}") + ";")
        em.reduced[r.id] = f"red{r.id}"
    outs = list(zip(g.outputs, plan.out_kind, strict=True))
    if "full" in plan.out_kind:
        start = len(em.lines)
        for j, (o, kind) in enumerate(outs):
            if kind == "full":
                _store(em, args, j, o, full_t, io)
        em.reset()
        loops.append((start, len(em.lines)))
    em.emit("if (lid == 0) {")
    em.indent += 1
    for j, (o, kind) in enumerate(outs):
        if kind == "row":
            _store(em, args, j, o, rowwise.coords_for(plan, o, rc), io)
    for i, p in enumerate(plan.post):
        x = p.args[0]
        val = em.eval(x, rowwise.coords_for(plan, x, rc))
        args.add(f"tmp{i}", "", f"ptr:tmp{i}")
        em.emit(f"tmp{i}[rows] = (float)({val});")
    em.indent -= 1
    em.emit("}")
    post_lines: list[str] = []
    if plan.post:
        pem = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
        for i, p in enumerate(plan.post):
            kind = p.attrs["kind"]
            pem.emit(f"float pacc{i} = {_IDENT[kind]};")
            pem.emit(f"for (idx_t r = (idx_t)tid; r < n_rows; r += (idx_t)THREADS) pacc{i} = "
                     + _COMB[kind].format(a=f"pacc{i}", b=f"tmp{i}[r]") + ";")
            pem.emit(f"float total{i} = porter_tg_reduce<{_OPCODE[kind]}>(pacc{i}, part, lane, "
                     "sg);")
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
        post_lines = pem.lines
    sig.from_args(args)
    types = {b["name"]: b["type"] for b in sig.buffers if b["role"] != "scalar"}
    # the column loops, each scalar or vectorised, in place of their bodies
    body: list[str] = []
    pos = 0
    for start, end in loops:
        body += em.lines[pos:start]
        body += row_loop([ln.removeprefix("    ") for ln in em.lines[start:end]],
                          cfg.vec, sig, types, vec_terms)
        pos = end
    body += em.lines[pos:]
    n_rows, n_cols = rowwise.size_exprs(plan)
    sizes = {"n_rows": sym_to_python(n_rows, g.symbols),
             "n_cols": sym_to_python(n_cols, g.symbols)}
    sig.scalar("n_rows", sizes["n_rows"])
    sig.scalar("n_cols", sizes["n_cols"])
    if cfg.vec > 1:
        sig.scalar("vec_ok", vec_ok_expr(vec_terms, sizes["n_cols"], cfg.vec))
    grid = "n_rows" if cfg.rows == 1 else f"-(-n_rows // {cfg.rows})"
    disp = make_dispatch(common["kname"], sig, cfg, io, sizes=sizes, grid=grid,
                         threads=cfg.threads, post=bool(post_lines))
    src = ENV.get_template("metal_rowwise.metal.j2").render(
        **common, params=sig.params, scalar_lines=sig.scalar_lines, body=body,
        row_coord_lines=coord_lines, threads=cfg.threads, rows=cfg.rows, post=post_lines,
        dispatch_json=json.dumps(disp, sort_keys=True))
    return src, disp


def _render_matmul(op: GeneratedOp, cfg: MetalConfig, io: torch.dtype, args: KernelArgs,
                   sig: Signature, common: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """C = A @ B through simdgroup_float8x8 matrices, the epilogue per element (see the
    template's header)."""
    g = op.graph
    mm = next(n for n in g.live() if n.op == "mm")
    if op._mm.get("views"):
        raise UnsupportedOpError(mm.origin or "mm", "the Metal matmul takes 2-D inputs or "
                                 "their transposes (no reshaped or batched operands)")
    ka, am, ak = op._mm["a"]
    kb, bk_dim, bn = op._mm["b"]
    args.input_ptr(ka)
    args.input_ptr(kb)
    a_load = f"in{ka}[gm * {args.input_stride(ka, am)} + gk * {args.input_stride(ka, ak)}]"
    b_load = f"in{kb}[gk * {args.input_stride(kb, bk_dim)} + gn * {args.input_stride(kb, bn)}]"
    em = Emitter(g, args, full_mask=None, row_mask=None, dialect="metal")
    coords = (Coord("m", True), Coord("n", True))
    em.fixed[mm.id] = (coords, "acc_v")
    for j, o in enumerate(g.outputs):
        val = em.eval(o, coords)
        args.output_ptr(j)
        em.emit(f"out{j}[m * {args.output_stride(j, 0)} + n * {args.output_stride(j, 1)}] = "
                f"{_cast(o, io)}({val});")
    sig.from_args(args)
    sizes = {k: sym_to_python(v, g.symbols) for k, v in op._mm["mnk"].items()}
    for name in ("M", "N", "K"):
        sig.scalar(name, sizes[name])
    disp = make_dispatch(common["kname"], sig, cfg, io, sizes=sizes,
                         grid=f"-(-N // {cfg.tile})", threads=128)
    disp["launches"][0]["threadgroups"][1] = f"-(-M // {cfg.tile})"
    disp["config"].update(tile=cfg.tile, bk=cfg.bk, threads=128)
    src = ENV.get_template("metal_matmul.metal.j2").render(
        **common, params=sig.params, scalar_lines=sig.scalar_lines, body=em.lines,
        tile=cfg.tile, bk=cfg.bk, a_load=a_load, b_load=b_load,
        dispatch_json=json.dumps(disp, sort_keys=True))
    return src, disp


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
