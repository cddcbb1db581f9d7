"""bench/probe_rowwise.py: its source transforms still compute the op (run on the CPU)."""

from __future__ import annotations

import torch

import pytest

from bench.probe_rowwise import transform
from bench.sweep import generated
from porter.codegen import load_generated_module
from porter.codegen import rowwise


def _run(op: str, src: str, name: str, shape: tuple[int, ...], cfg: dict) -> None:
    spec, _ = generated(op)
    module = load_generated_module(src, name, interpret=True)
    gen = torch.Generator().manual_seed(5)
    inputs = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
    got = module.launch(*inputs, config=cfg)
    want = spec.reference(*[x.double() if x.is_floating_point() else x for x in inputs])
    torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=1e-5)


@pytest.fixture
def two_round(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two-round layernorm (the emitter's default): var1, welford and shift edit it."""
    monkeypatch.setattr(rowwise, "ONE_ROUND_VARIANCE", False)


def test_var1_reduces_sum_and_sum_of_squares_at_once_and_stays_right(two_round: None) -> None:
    _, gen_op = generated("layernorm")
    base = gen_op.triton_module_source()
    src = transform(base, "var1")
    single = src[src.index("def _layernorm_single_pass_kernel"):src.index("_looped_kernel(")]
    # both branches of HOIST: one two-value reduction, no second tl.sum after the mean
    assert single.count("_probe_add2)") == 2 and "tl.sum(" not in single
    for shape, hoist in (((5, 70), False), ((3, 129), True)):
        _run("layernorm", src, "probe_var1", shape,
             {"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 256, "num_warps": 1, "HOIST": hoist})
    # an op without layernorm's variance is left alone
    _, softmax_op = generated("softmax")
    assert transform(softmax_op.triton_module_source(), "var1") == \
        softmax_op.triton_module_source()


def test_welford_triples_give_the_variance_in_one_reduction(two_round: None) -> None:
    _, gen_op = generated("layernorm")
    base = gen_op.triton_module_source()
    src = transform(base, "welford")
    single = src[src.index("def _layernorm_single_pass_kernel"):src.index("_looped_kernel(")]
    assert single.count("_probe_welford)") == 2 and "tl.sum(" not in single
    one = {"strategy": "single_pass", "ROWS": 2, "num_warps": 1}
    _run("layernorm", src, "probe_welford", (5, 70), {**one, "BLOCK_N": 128})
    # constant counts: right on full rows, and the check sees it wrong on padded ones
    even = transform(base, "welford_even")
    _run("layernorm", even, "probe_welford_even", (4, 64), {**one, "BLOCK_N": 64, "HOIST": True})
    try:
        _run("layernorm", even, "probe_welford_even_pad", (4, 60), {**one, "BLOCK_N": 64})
    except AssertionError:
        pass
    else:
        raise AssertionError("welford_even counted the masked lanes and still matched")


def test_lse1_pairs_max_and_sum_in_every_softmax_kernel() -> None:
    for op in ("softmax", "cross_entropy"):
        _, gen_op = generated(op)
        src = transform(gen_op.triton_module_source(), "lse1")
        # softmax: single pass, persistent, looped; cross-entropy: the same three kernels
        assert src.count("_probe_lse)") == 3, op
        for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 128, "num_warps": 1},
                    {"strategy": "looped", "ROWS": 1, "BLOCK_N": 32, "num_warps": 1},
                    {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 128, "num_warps": 1}):
            _run(op, src, f"probe_lse1_{op}", (5, 70), cfg)


def test_shift_and_ffma_stay_right(two_round: None) -> None:
    _, gen_op = generated("layernorm")
    src = transform(gen_op.triton_module_source(), "shift")
    single = src[src.index("def _layernorm_single_pass_kernel"):src.index("_looped_kernel(")]
    assert single.count("_probe_add2)") == 2 and "tl.sum(" not in single
    _run("layernorm", src, "probe_shift", (5, 70),
         {"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 128, "num_warps": 1})
    for op in ("softmax", "cross_entropy"):
        _, gen_op = generated(op)
        src = transform(gen_op.triton_module_source(), "ffma")
        assert "tl.where(mask & safe" not in src and f"* {1.4426950408889634} -" in src, op
        for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 128, "num_warps": 1},
                    {"strategy": "looped", "ROWS": 2, "BLOCK_N": 32, "num_warps": 1}):
            _run(op, src, f"probe_ffma_{op}", (5, 70), cfg)
