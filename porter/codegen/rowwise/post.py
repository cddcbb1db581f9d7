"""The fold kernel's body: one program folds the per-row values (cross-entropy's losses) into
the scalar outputs in a fixed order, deterministic and without atomics. It polls each block of
the main grid's words until all carry this call's stamp (see the template's post kernel)."""

from __future__ import annotations

from porter.codegen.emit import Emitter
from porter.codegen.rowwise.analysis import COMBINE
from porter.codegen.rowwise.analysis import IDENTITY
from porter.codegen.rowwise.analysis import REDUCE
from porter.codegen.rowwise.rowgen import RowGen


def fold(rg: RowGen) -> list[str] | None:
    """The fold kernel's body, or None where the op has no scalar output to fold."""
    if not rg.plan.post:
        return None
    em = Emitter(rg.g, rg.args)
    em.emit("late = False  # a word never stamped within MAX_SPINS polls: the result is NaN")
    for i, p in enumerate(rg.plan.post):
        kind = p.attrs["kind"]
        em.emit(f"pacc{i} = tl.full([BLOCK], {IDENTITY[kind]}, tl.float32)")
    em.emit("for start in range(0, n_rows, BLOCK):")
    em.emit("    offs = start + tl.arange(0, BLOCK)")
    em.emit("    m = offs < n_rows")
    loads = [f"    w{i} = tl.load(words_ptr + {i} * n_rows + offs, mask=m, other=stamp, "
             "volatile=True)" for i in range(len(rg.plan.post))]
    unstamped = " | ".join(f"((w{i} >> 32) != (stamp >> 32))" for i in range(len(rg.plan.post)))
    for ln in loads:
        em.emit(ln)
    em.emit("    spins = 0")
    em.emit(f"    while (tl.max(({unstamped}).to(tl.int32), axis=0) > 0) & (spins < MAX_SPINS):")
    for ln in loads:
        em.emit("    " + ln)
    em.emit("        spins += 1")
    em.emit(f"    late = late | (tl.max(({unstamped}).to(tl.int32), axis=0) > 0)")
    for i, p in enumerate(rg.plan.post):
        kind = p.attrs["kind"]
        bits = f"(w{i} & 0xFFFFFFFF).to(tl.uint32).to(tl.float32, bitcast=True)"
        em.emit(f"    pacc{i} = " + COMBINE[kind].format(
            a=f"pacc{i}", b=f"tl.where(m, {bits}, {IDENTITY[kind]})"))
    for i, p in enumerate(rg.plan.post):
        total = em.tmp(f"{REDUCE[p.attrs['kind']]}(pacc{i}, axis=0)", "total")
        em.reduced[p.id] = em.tmp(f"tl.where(late, float('nan'), {total})", "total")
    for j, (o, kind) in enumerate(rg.outs):
        if kind == "scalar":
            val = em.eval(o, ())
            ptr = rg.args.output_ptr(j)
            em.emit(f"tl.store({ptr}, ({val}).to({ptr}.dtype.element_ty))")
    return em.lines
