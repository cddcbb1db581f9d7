"""bench/probe_rowwise.py: its source transforms still compute the op (run on the CPU)."""

from __future__ import annotations

import torch

from bench.probe_rowwise import transform
from bench.sweep import generated
from porter.codegen import load_generated_module


def test_var1_reduces_sum_and_sum_of_squares_at_once_and_stays_right() -> None:
    spec, gen_op = generated("layernorm")
    base = gen_op.triton_module_source()
    src = transform(base, "var1")
    single = src[src.index("def _layernorm_single_pass_kernel"):src.index("_looped_kernel(")]
    # both branches of HOIST: one two-value reduction, no second tl.sum after the mean
    assert single.count("tl.reduce((") == 2 and "tl.sum(" not in single
    module = load_generated_module(src, "probe_var1", interpret=True)
    gen = torch.Generator().manual_seed(3)
    for shape, hoist in (((5, 70), False), ((3, 129), True)):
        inputs = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
        cfg = {"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 256, "num_warps": 1,
               "HOIST": hoist}
        got = module.launch(*inputs, config=cfg)
        want = spec.reference(*[x.double() for x in inputs])
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    # an op without layernorm's variance is left alone
    _, softmax_op = generated("softmax")
    assert transform(softmax_op.triton_module_source(), "var1") == \
        softmax_op.triton_module_source()
