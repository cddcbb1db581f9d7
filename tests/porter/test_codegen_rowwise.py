"""The row-wise generator's pieces (`porter.codegen.rowwise`): what `RowGen` reads off a plan,
what each named emitter emits, the statement reordering, and the names the package keeps from
the module it was."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from porter.codegen import rowwise
from porter.codegen.emit import KernelArgs
from porter.codegen.plan import row_plan
from porter.codegen.rowwise import RowGen
from porter.codegen.rowwise.hoist import hoist_reduction_free
from porter.codegen.rowwise.hoist import split_invariant
from porter.codegen.rowwise.looped import looped
from porter.codegen.rowwise.one_block import choose_fills
from porter.codegen.rowwise.one_block import persistent
from porter.codegen.rowwise.one_block import single_pass
from porter.codegen.rowwise.one_block import two_block
from porter.codegen.rowwise.post import fold
from porter.codegen.trace import trace


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, dim=-1)


def _layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def _l2norm(x: torch.Tensor) -> torch.Tensor:
    return F.normalize(x, dim=-1)


def _cross_entropy(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(x, t)


def _rowgen(fn: Any, *inputs: torch.Tensor) -> RowGen:
    g = trace(fn, inputs)
    rg = RowGen.of(g, row_plan(g), KernelArgs(g.symbols))
    rg.fills = choose_fills(rg)
    return rg


def test_rowgen_reads_the_pairs_off_the_plan() -> None:
    sm = _rowgen(_softmax, torch.randn(4, 100))
    assert len(sm.pairs) == 1 and not sm.variance and not sm.ssq
    assert sm.paired_sums == {s.id for s in sm.pairs.values()}
    assert -float("inf") in sm.fills.values()  # the max's input loaded with its identity
    ln = _rowgen(_layernorm, torch.randn(4, 100), torch.randn(100), torch.randn(100))
    assert len(ln.variance) == 1 and not ln.pairs
    assert ln.variance_second == {s.id for s in ln.variance.values()}
    l2 = _rowgen(_l2norm, torch.randn(4, 100))
    assert len(l2.ssq) == 1


def test_single_pass_reduces_softmax_without_a_select() -> None:
    body = single_pass(_rowgen(_softmax, torch.randn(4, 100)))
    text = "\n".join(body)
    assert "_max_sum_exp" in text  # the (max, sum of exps) pairs combine in one reduction
    assert "tl.where(mask" not in text  # masked lanes hold -inf from the load
    assert body[-1].lstrip().startswith("tl.store(")


def test_two_block_reduces_over_the_head_and_the_tail() -> None:
    text = "\n".join(two_block(_rowgen(_layernorm, torch.randn(4, 100), torch.randn(100),
                                         torch.randn(100))))
    assert "mask_t" in text and "cols_t" in text
    assert "if VAR1:" in text and "else:" in text


def test_persistent_loads_the_weights_before_the_row_loop() -> None:
    pre, body = persistent(_rowgen(_layernorm, torch.randn(4, 100), torch.randn(100),
                                   torch.randn(100)))
    assert any("tl.load(" in ln for ln in pre) and not any("rows" in ln for ln in pre)
    assert any("tl.store(" in ln for ln in body)


def test_looped_fuses_the_online_softmax_and_the_robust_norm() -> None:
    rg = _rowgen(_softmax, torch.randn(4, 100))
    body, online = looped(rg)
    ((m, s),) = rg.pairs.items()
    assert online == [(m, s.id)]
    assert sum(ln.lstrip().startswith("for start in range(") for ln in body) == 2  # max+sum, out
    l2_body, l2_online = looped(_rowgen(_l2norm, torch.randn(4, 100)))
    assert not l2_online and any("s_acc = s_acc * ratio * ratio" in ln for ln in l2_body)


def test_fold_only_where_a_scalar_is_folded() -> None:
    assert fold(_rowgen(_softmax, torch.randn(4, 100))) is None
    ce = fold(_rowgen(_cross_entropy, torch.randn(4, 10), torch.randint(0, 10, (4,))))
    assert ce is not None and any("MAX_SPINS" in ln for ln in ce)


def test_build_assembles_the_bodies() -> None:
    x = torch.randn(4, 100)
    g = trace(_softmax, (x,))
    bodies = rowwise.build(g, row_plan(g), KernelArgs(g.symbols))
    assert bodies.single == single_pass(_rowgen(_softmax, x))
    assert bodies.post is None and bodies.online_pairs and not bodies.one_round_variance


def test_split_invariant_and_hoist_move_only_what_needs_nothing_variant() -> None:
    lines = ["    a = tl.load(x_ptr + rows)", "    w = tl.load(w_ptr + cols)",
             "    s = tl.sum(a, axis=1)", "    y = a * w / s", "    v = w * 2.0"]
    # nothing is variant: every load moves, the reduction and what uses it stay
    assert hoist_reduction_free(lines) == [lines[0], lines[1], lines[4], lines[2], lines[3]]
    movable, rest = split_invariant(lines, {"rows"})
    assert movable == [lines[1], lines[4]] and rest == [lines[0], lines[2], lines[3]]


def test_the_module_names_stay_importable() -> None:
    for name in ("build", "RowBodies", "size_exprs", "hoist_reduction_free", "split_invariant",
                 "_row_coords", "_coords_for", "IDENTITY", "COMBINE", "REDUCE"):
        assert hasattr(rowwise, name), name
