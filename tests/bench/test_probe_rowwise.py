"""bench/probe_rowwise.py: its source transforms still compute the op (run on the CPU)."""

from __future__ import annotations

import torch

from bench.probe_rowwise import transform
from bench.sweep import generated
from porter.codegen import load_generated_module


def _run(op: str, src: str, name: str, shape: tuple[int, ...], cfg: dict) -> None:
    spec, _ = generated(op)
    module = load_generated_module(src, name, interpret=True)
    gen = torch.Generator().manual_seed(5)
    inputs = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
    got = module.launch(*inputs, config=cfg)
    want = spec.reference(*[x.double() if x.is_floating_point() else x for x in inputs])
    torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=1e-5)


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


def test_ffma_stays_right() -> None:
    for op in ("softmax", "cross_entropy"):
        _, gen_op = generated(op)
        src = transform(gen_op.triton_module_source(), "ffma")
        assert "tl.where(mask & safe" not in src and f"* {1.4426950408889634} -" in src, op
        for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 128, "num_warps": 1},
                    {"strategy": "looped", "ROWS": 2, "BLOCK_N": 32, "num_warps": 1}):
            _run(op, src, f"probe_ffma_{op}", (5, 70), cfg)


def test_masked_keeps_every_mask_and_stays_right() -> None:
    _, gen_op = generated("softmax")
    base = gen_op.triton_module_source()
    src = transform(base, "masked")
    assert base.count(" | EVEN") >= 5 and " | EVEN" not in src
    # full rows and row blocks (EVEN true in base), so only the masks differ
    for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 64, "num_warps": 1},
                {"strategy": "looped", "ROWS": 1, "BLOCK_N": 32, "num_warps": 1}):
        _run("softmax", src, "probe_masked", (4, 64), cfg)
