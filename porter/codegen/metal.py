"""Metal Shading Language emission for the elementwise, rowwise and matmul families, for Apple GPUs.

Written the way Apple GPUs want it (SIMD-groups of 32 threads, 32 KB of threadgroup memory):

- rowwise: a reduction is a SIMD-group reduction in registers (`simd_sum`/`simd_max`); with one
  threadgroup per row (`rows` 1) the per-SIMD-group partials meet in THREADS/32 floats of
  threadgroup memory, and with one SIMD-group per row (`rows` = threads/32, for short rows) there
  is no threadgroup memory and no barrier at all;
- indices are 32-bit (`index` "i32") when every buffer the bucket's shapes touch holds < 2^31
  elements (the host refuses larger ones), else 64-bit;
- rows (or flat ranges) are loaded and stored as 2- or 4-wide vectors (`vec`) when the host
  finds them aligned (`vec_ok`, worked out from strides and storage offsets), else scalar;
- matmul with an epilogue: 8x8 `simdgroup_float8x8` matrices, four SIMD-groups per
  TILE x TILE output tile, A and B staged through threadgroup memory BK at a time.

Each source carries its dispatch (buffer order, roles, the host expressions of every scalar, the
grid and threadgroup sizes) as one `// porter-dispatch: {json}` line, read by
`targets.metal_host` for the CPU executor and for the MPS backend on a Mac.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

import sympy
import torch

from porter.codegen import rowwise
from porter.codegen.emit import METAL_DTYPE
from porter.codegen.emit import Coord
from porter.codegen.emit import Emitter
from porter.codegen.emit import KernelArgs
from porter.codegen.emit import sym_to_python
from porter.codegen.ir import Node
from porter.codegen.templates import ENV
from porter.codegen.templates import safe_name
from targets.dtypes import FLOAT_NAMES
from targets.dtypes import torch_dtype

if TYPE_CHECKING:
    from hwmodels.model import HardwareModel
    from porter.codegen.op import GeneratedOp

DISPATCH_FORMAT = "porter-metal-dispatch/1"
SIMD_WIDTH = 32
_IDENT = {"sum": "0.0f", "max": "(-INFINITY)", "min": "INFINITY"}
_COMB = {"sum": "{a} + {b}", "max": "fmax({a}, {b})", "min": "fmin({a}, {b})"}
_OPCODE = {"sum": 0, "max": 1, "min": 2}
_LANE = "xyzw"


@dataclass(frozen=True)
class MetalConfig:
    """One point of the Metal variant space.

    threads: threads per threadgroup (a multiple of 32); rows: rows per threadgroup, 1 or
    threads // 32 (one SIMD-group per row); vec: vector width of loads and stores (1, 2, 4);
    index_bits: 32 or 64.
    """

    threads: int = 256
    rows: int = 1
    vec: int = 1
    index_bits: int = 64
    tile: int = 32  # matmul: output tile per threadgroup (TILE x TILE)
    bk: int = 16  # matmul: K step staged through threadgroup memory

    @staticmethod
    def of(config: dict[str, Any]) -> MetalConfig:
        threads = int(config.get("threads", 256))
        rows = int(config.get("rows", 1))
        vec = int(config.get("vec", 1))
        bits = 32 if config.get("index", "i64") == "i32" else 64
        if threads % SIMD_WIDTH or not 32 <= threads <= 1024:
            raise ValueError(f"Metal threads per threadgroup must be a multiple of 32 in "
                             f"32..1024, got {threads}")
        if rows not in (1, threads // SIMD_WIDTH):
            raise ValueError(f"Metal rows per threadgroup must be 1 or threads/32 = "
                             f"{threads // SIMD_WIDTH}, got {rows}")
        if vec not in (1, 2, 4):
            raise ValueError(f"Metal vector width must be 1, 2 or 4, got {vec}")
        tile, bk = int(config.get("tile", 32)), int(config.get("bk", 16))
        if tile not in (16, 32, 64) or bk % 8 or not 8 <= bk <= 64:
            raise ValueError(f"Metal matmul tile must be 16, 32 or 64 and bk a multiple of 8 "
                             f"up to 64, got tile={tile} bk={bk}")
        return MetalConfig(threads, rows, vec, bits, tile, bk)


def _elem_type(kind: str, io: torch.dtype, op: GeneratedOp) -> str | None:
    if kind.startswith("ptr:in"):
        dt = op.example_inputs[int(kind[6:])].dtype
        return METAL_DTYPE[io if dt.is_floating_point else dt]
    if kind.startswith("ptr:out"):
        dt = op.graph.outputs[int(kind[7:])].dtype
        return METAL_DTYPE[io if dt.is_floating_point else dt]
    if kind.startswith("ptr:tmp"):
        return "float"
    return None


def _io_dtype(op: GeneratedOp, config: dict[str, Any]) -> torch.dtype:
    io = torch_dtype(config["dtype"]) if config.get("dtype") in FLOAT_NAMES else None
    if io is None:
        io = next(x.dtype for x in op.example_inputs
                  if isinstance(x, torch.Tensor) and x.dtype.is_floating_point)
    return io


class _Sig:
    """The kernel's buffers in order: declarations, scalar locals, and the dispatch entries."""

    def __init__(self, op: GeneratedOp, io: torch.dtype) -> None:
        self.op, self.io = op, io
        self.params: list[str] = []
        self.scalar_lines: list[str] = []
        self.buffers: list[dict[str, Any]] = []

    def from_args(self, args: KernelArgs) -> None:
        for name, kind, expr in zip(args.params, args.kinds, args.launch_exprs, strict=True):
            t = _elem_type(kind, self.io, self.op)
            if t is None:
                self.scalar(name, expr)
                continue
            label = kind.split(":")[1]
            const = "const " if label.startswith("in") else ""
            self.params.append(f"device {const}{t}* {label}")
            entry: dict[str, Any] = {"name": label, "type": t}
            if label.startswith("in"):
                entry.update(role="input", arg=int(label[2:]))
            elif label.startswith("out"):
                entry.update(role="output", out=int(label[3:]))
            else:
                entry.update(role="tmp", tmp=int(label[3:]), count="n_rows")
            self.buffers.append(entry)

    def scalar(self, name: str, expr: str) -> None:
        """A `constant long&` buffer, copied into an idx_t local of the same name."""
        self.params.append(f"constant long& {name}_")
        self.scalar_lines.append(f"const idx_t {name} = (idx_t){name}_;")
        self.buffers.append({"name": name, "role": "scalar", "type": "long", "expr": expr})


# -- vectorised loops -------------------------------------------------------------------------

_ROW_LOAD_RE = re.compile(r"in(\d+)\[((?:\w+ \* in\1_s\d+ \+ )*)c \* (in\1_cs\d+)\]")
_ROW_STORE_RE = re.compile(r"^(\s*)out(\d+)\[((?:\w+ \* out\2_s\d+ \+ )*)c \* (out\2_s\d+)\] = "
                           r"(.*);$")
_FLAT_LOAD_RE = re.compile(r"in(\d+)\[offs\]")
_FLAT_STORE_RE = re.compile(r"^(\s*)out(\d+)\[offs\] = (.*);$")


def _row_loop(body: list[str], vec: int, sig: _Sig, types: dict[str, str],
              vec_terms: list[str]) -> list[str]:
    """The column loop around `body` (lines using `c`): scalar, or vectorised when aligned.

    Vector mode reads each `in<k>[<row part> + c * in<k>_cs<d>]` once per `vec` columns as one
    vector (and writes each `out<j>[... + c * out<j>_s<d>] = v` as one), when the host's vec_ok
    says every such stride is 1 and every row start aligned. `vec_terms` gets the host
    conditions, as Python over `inputs`/`outs`.
    """
    scalar = ["    for (idx_t c = lid; c < n_cols; c += LANES) {",
              *["    " + ln for ln in body], "    }"]
    if vec == 1:
        return scalar
    loads: dict[tuple[str, str], str] = {}
    stores: dict[tuple[str, str], str] = {}
    unit: set[str] = set()
    rowparts: set[str] = set()

    def load(m: re.Match[str]) -> str:
        k, rowpart, cs = m.group(1), m.group(2), m.group(3)
        key = (k, rowpart)
        if key not in loads:
            loads[key] = f"xv{k}_{len(loads)}"
        unit.add(cs)
        rowparts.add(rowpart)
        return f"{loads[key]}[J]"

    per_lane: list[str] = []
    for line in body:
        sm = _ROW_STORE_RE.match(line)
        if sm:
            j, rowpart, stride, value = sm.group(2), sm.group(3), sm.group(4), sm.group(5)
            key = (j, rowpart)
            if key not in stores:
                stores[key] = f"ov{j}_{len(stores)}"
            unit.add(stride)
            rowparts.add(rowpart)
            per_lane.append(f"{sm.group(1)}{stores[key]}[J] = {_ROW_LOAD_RE.sub(load, value)};")
            continue
        if re.search(r"\bout\d+\[", line):
            return scalar  # a store this loop cannot vectorise (e.g. a reshaped output)
        per_lane.append(_ROW_LOAD_RE.sub(load, line))
    if not loads and not stores:
        return scalar
    decl = {name: types[f"in{k}"] for (k, _), name in loads.items()}
    decl.update({name: types[f"out{j}"] for (j, _), name in stores.items()})
    lines = ["    if (vec_ok) {",
             f"        for (idx_t cv = lid; cv < n_cols / {vec}; cv += LANES) {{"]
    for (k, rowpart), name in loads.items():
        base = f"in{k} + {rowpart[:-3]}" if rowpart else f"in{k}"
        lines.append(f"            {decl[name]}{vec} {name} = "
                     f"((device const {decl[name]}{vec}*)({base}))[cv];")
    for name in stores.values():
        lines.append(f"            {decl[name]}{vec} {name};")
    uses_c = any(re.search(r"\bc\b", ln) for ln in per_lane)
    for lane in range(vec):
        lines.append("            {")
        if uses_c:  # a load this loop does not vectorise (a gather, a strided input)
            lines.append(f"                const idx_t c = cv * {vec} + {lane};")
        lines += ["            " + ln.replace("[J]", f".{_LANE[lane]}") for ln in per_lane]
        lines.append("            }")
    for (j, rowpart), name in stores.items():
        base = f"out{j} + {rowpart[:-3]}" if rowpart else f"out{j}"
        lines.append(f"            ((device {decl[name]}{vec}*)({base}))[cv] = {name};")
    lines += ["        }", "    } else {", *["    " + ln for ln in scalar], "    }"]
    exprs = {b["name"]: b.get("expr") for b in sig.buffers}
    for name in sorted(unit):
        vec_terms.append(f"{exprs[name]} == 1")
    for rowpart in sorted(rowparts):
        for stride in re.findall(r"\* (\w+) \+", rowpart):
            vec_terms.append(f"{exprs[stride]} % {vec} == 0")
    for (k, _) in loads:
        vec_terms.append(f"inputs[{k}].storage_offset() % {vec} == 0")
    for (j, _) in stores:
        vec_terms.append(f"outs[{j}].storage_offset() % {vec} == 0")
    return lines


# -- rendering --------------------------------------------------------------------------------

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
    sig = _Sig(op, io)
    vec_terms: list[str] = []
    if op.family == "matmul_epilogue":
        return _render_matmul(op, cfg, io, args, sig, common)
    if op.plan is None:
        body, numel = _flat_body(op, args, io, cfg.vec)
        sig.from_args(args)
        types = {b["name"]: b["type"] for b in sig.buffers if b["role"] != "scalar"}
        body = _flat_vectorise(body, cfg.vec, types, vec_terms, numel)
        sig.scalar("n_elements", numel)
        if cfg.vec > 1:
            sig.scalar("vec_ok", _vec_ok(vec_terms, numel, cfg.vec))
        threads = cfg.threads
        disp = _dispatch(kname, sig, cfg, io, sizes={"n_elements": numel},
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


def _flat_vectorise(body: list[str], vec: int, types: dict[str, str], vec_terms: list[str],
                    numel: str) -> list[str]:
    """Each thread's `vec` elements: one vector load/store per tensor when aligned and whole,
    else element by element (the tail of the range, or unaligned buffers)."""
    scalar = [("    for (idx_t offs = base; offs < base + (idx_t)VEC && offs < n_elements; "
               "++offs) {"), *["    " + ln for ln in body], "    }"]
    if vec == 1:
        return ["    const idx_t offs = base;", *body]
    loads: dict[str, str] = {}
    stores: dict[str, str] = {}
    per_lane = []
    for line in body:
        sm = _FLAT_STORE_RE.match(line)
        value = line
        if sm:
            j = sm.group(2)
            stores.setdefault(j, f"ov{j}")
            value = f"{sm.group(1)}ov{j}[J] = {sm.group(3)};"

        def load(m: re.Match[str]) -> str:
            k = m.group(1)
            loads.setdefault(k, f"xv{k}")
            return f"xv{k}[J]"

        per_lane.append(_FLAT_LOAD_RE.sub(load, value))
    lines = ["    if (vec_ok && base + (idx_t)VEC <= n_elements) {"]
    for k, name in loads.items():
        t = types[f"in{k}"]
        lines.append(f"        {t}{vec} {name} = ((device const {t}{vec}*)(in{k}))[base / VEC];")
    for j, name in stores.items():
        lines.append(f"        {types[f'out{j}']}{vec} {name};")
    for lane in range(vec):
        lines.append("        {")
        lines.append(f"            const idx_t offs = base + {lane};")
        lines += ["        " + ln.replace("[J]", f".{_LANE[lane]}") for ln in per_lane]
        lines.append("        }")
    for j, name in stores.items():
        lines.append(f"        ((device {types[f'out{j}']}{vec}*)(out{j}))[base / VEC] = {name};")
    lines += ["    } else {", *["    " + ln for ln in scalar], "    }"]
    for k in loads:
        vec_terms.append(f"inputs[{k}].storage_offset() % {vec} == 0")
    for j in stores:
        vec_terms.append(f"outs[{j}].storage_offset() % {vec} == 0")
    return lines


def _vec_ok(terms: list[str], extent: str, vec: int) -> str:
    conds = [f"({extent}) % {vec} == 0", *dict.fromkeys(terms)]
    return "int(" + " and ".join(f"({c})" for c in conds) + ")"


def _render_rowwise(op: GeneratedOp, cfg: MetalConfig, io: torch.dtype, args: KernelArgs,
                    sig: _Sig, common: dict[str, Any],
                    vec_terms: list[str]) -> tuple[str, dict[str, Any]]:
    g = op.graph
    plan = op.plan
    assert plan is not None
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
        body += _row_loop([ln.removeprefix("    ") for ln in em.lines[start:end]],
                          cfg.vec, sig, types, vec_terms)
        pos = end
    body += em.lines[pos:]
    n_rows, n_cols = rowwise.size_exprs(plan)
    sizes = {"n_rows": sym_to_python(n_rows, g.symbols),
             "n_cols": sym_to_python(n_cols, g.symbols)}
    sig.scalar("n_rows", sizes["n_rows"])
    sig.scalar("n_cols", sizes["n_cols"])
    if cfg.vec > 1:
        sig.scalar("vec_ok", _vec_ok(vec_terms, sizes["n_cols"], cfg.vec))
    grid = "n_rows" if cfg.rows == 1 else f"-(-n_rows // {cfg.rows})"
    disp = _dispatch(common["kname"], sig, cfg, io, sizes=sizes, grid=grid, threads=cfg.threads,
                     post=bool(post_lines))
    src = ENV.get_template("metal_rowwise.metal.j2").render(
        **common, params=sig.params, scalar_lines=sig.scalar_lines, body=body,
        row_coord_lines=coord_lines, threads=cfg.threads, rows=cfg.rows, post=post_lines,
        dispatch_json=json.dumps(disp, sort_keys=True))
    return src, disp


def _render_matmul(op: GeneratedOp, cfg: MetalConfig, io: torch.dtype, args: KernelArgs,
                   sig: _Sig, common: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """C = A @ B through simdgroup_float8x8 matrices, the epilogue per element (see the
    template's header)."""
    g = op.graph
    mm = next(n for n in g.live() if n.op == "mm")
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
    disp = _dispatch(common["kname"], sig, cfg, io, sizes=sizes,
                     grid=f"-(-N // {cfg.tile})", threads=128)
    disp["launches"][0]["threadgroups"][1] = f"-(-M // {cfg.tile})"
    disp["config"].update(tile=cfg.tile, bk=cfg.bk, threads=128)
    src = ENV.get_template("metal_matmul.metal.j2").render(
        **common, params=sig.params, scalar_lines=sig.scalar_lines, body=em.lines,
        tile=cfg.tile, bk=cfg.bk, a_load=a_load, b_load=b_load,
        dispatch_json=json.dumps(disp, sort_keys=True))
    return src, disp


def _dispatch(kname: str, sig: _Sig, cfg: MetalConfig, io: torch.dtype, *, sizes: dict[str, str],
              grid: str, threads: int, post: bool = False) -> dict[str, Any]:
    """What a host needs to run the kernel: see targets.metal_host for how it is read."""
    launches = [{"kernel": kname, "threadgroups": [grid, "1", "1"], "threads": [threads, 1, 1]}]
    if post:
        launches.append({"kernel": kname + "_post", "threadgroups": ["1", "1", "1"],
                         "threads": [threads, 1, 1]})
    return {
        "format": DISPATCH_FORMAT,
        "kernel": kname,
        "io_dtype": {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}[io],
        "buffers": [dict(b, index=i) for i, b in enumerate(sig.buffers)],
        "sizes": sizes,
        "launches": launches,
        "index_bits": cfg.index_bits,
        "config": {"threads": cfg.threads, "rows": cfg.rows, "vec": cfg.vec,
                   "index": f"i{cfg.index_bits}"},
    }


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


# -- the variant space ------------------------------------------------------------------------

def variant_space(op: GeneratedOp, hw: HardwareModel | None, sizes: dict[str, int],
                  max_elements: int) -> list[dict[str, Any]]:
    """Metal configs for `op` at these problem sizes, pruned by the device model.

    threads per threadgroup: multiples of the SIMD width up to the device's maximum, and enough
    of them that a thread walks at most 16 vectors of a row; rows per
    threadgroup: 1 (threadgroup-wide rows) or one SIMD-group per row, offered only for rows
    no wider than 8 SIMD widths (a SIMD-group walks the row alone); a threadgroup's partials
    (threads/32 floats) must fit the device's threadgroup memory; vec 1, 2 or 4 (used only when
    the host finds the rows aligned); 32-bit indices when every buffer holds < 2^31 elements.
    """
    simd = int(hw.warp_size) if hw is not None else SIMD_WIDTH
    max_threads = int(hw.limits.max_threads_per_block.value) if hw is not None else 1024
    tg_bytes = int(hw.limits.shared_memory_per_block_bytes.value) if hw is not None else 32768
    index = "i32" if max_elements < 2 ** 31 else "i64"
    out: list[dict[str, Any]] = [default_config(op, sizes, max_threads, simd, index)]
    widths = [t for t in (32, 64, 128, 256, 512, 1024) if t <= max_threads and t % simd == 0]
    if op.family == "matmul_epilogue":
        # 4 SIMD-groups (128 threads); A and B slices plus the C tile in threadgroup memory
        if 128 > max_threads:
            return []
        for tile in (32, 64):
            for bk in (8, 16, 32):
                if 4 * (2 * tile * bk + tile * tile) <= tg_bytes:
                    out.append({"strategy": "metal", "threads": 128, "tile": tile, "bk": bk,
                                "index": index})
        return _dedup(out)
    if op.plan is None:
        numel = max(1, sizes.get("numel", 1))
        for t in widths:
            if t < 64 or t > 1024:
                continue
            for vec in (1, 2, 4):
                if numel < t * vec and t > 64:
                    continue  # one partial threadgroup: a smaller one does the same
                out.append({"strategy": "metal", "threads": t, "rows": 1, "vec": vec,
                            "index": index})
        return _dedup(out)
    n_cols = max(1, sizes.get("n_cols", 1))
    for t in widths:
        if (t // simd) * 4 > tg_bytes:
            continue
        for vec in (1, 2, 4):
            if t * vec > 2 * max(n_cols, simd) and t > simd:
                continue  # most threads would have no column
            # at most 16 vectors per thread per pass over a row (or the device's widest
            # threadgroup): a narrower threadgroup leaves a wide row to a few SIMD-groups
            need = 1 << max(0, math.ceil(math.log2(max(1, -(-n_cols // (16 * vec))))))
            if t < min(need, widths[-1]):
                continue
            out.append({"strategy": "metal", "threads": t, "rows": 1, "vec": vec,
                        "index": index})
            if t > simd and n_cols <= 8 * simd * vec:
                out.append({"strategy": "metal", "threads": t, "rows": t // simd, "vec": vec,
                            "index": index})
    return _dedup(out)


def default_config(op: GeneratedOp, sizes: dict[str, int], max_threads: int = 1024,
                   simd: int = SIMD_WIDTH, index: str = "i64") -> dict[str, Any]:
    """The config tried first (the projection cannot tell threadgroup shapes apart): 4-wide
    vectors; rows up to 8 SIMD widths one SIMD-group each, 8 rows per threadgroup; wider rows
    one threadgroup each, about 16 columns per thread, 64..max threads."""
    if op.family == "matmul_epilogue":
        big = min(sizes.get("M", 1), sizes.get("N", 1)) >= 256
        return {"strategy": "metal", "threads": 128, "tile": 64 if big else 32, "bk": 16,
                "index": index}
    if op.plan is None:
        return {"strategy": "metal", "threads": min(256, max_threads), "rows": 1, "vec": 4,
                "index": index}
    n_cols = max(1, sizes.get("n_cols", 1))
    if n_cols <= 8 * simd:
        t = min(8 * simd, max_threads)
        return {"strategy": "metal", "threads": t, "rows": t // simd, "vec": 4 if n_cols >= 128
                else 1, "index": index}
    t = 64
    while t < max_threads and t * 16 < n_cols:
        t *= 2
    return {"strategy": "metal", "threads": t, "rows": 1, "vec": 4, "index": index}


def _dedup(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen, out = set(), []
    for c in configs:
        key = tuple(sorted(c.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
