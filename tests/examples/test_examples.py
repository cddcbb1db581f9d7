"""Each example spec's reference runs on its interpreter shapes and gives finite outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from porter.specs import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "examples").glob("*/spec.py"))
CPU = torch.device("cpu")


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.parent.name)
def test_reference_runs_on_interpret_shapes(path: Path) -> None:
    spec = load_spec(path)
    gen = torch.Generator().manual_seed(0)
    for shape in spec.interpret_shapes:
        for dtype in spec.dtypes:
            inputs = spec.make_inputs(shape, dtype, torch.device("cpu"), gen)
            floats = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_floating_point()]
            assert all(bool(t.any()) for t in floats), "inputs must be random, not zeros"
            out = spec.reference(*inputs)
            outs = out if isinstance(out, tuple) else (out,)
            assert all(torch.isfinite(o.float()).all() for o in outs)
            assert spec.bytes_moved(inputs, out) > 0


def test_add_rmsnorm_has_two_outputs() -> None:
    spec = load_spec(ROOT / "examples/add_rmsnorm")
    x, res, w = spec.make_inputs((7, 129), torch.float32, CPU, torch.Generator().manual_seed(0))
    y, r = spec.reference(x, res, w)
    torch.testing.assert_close(r, x + res)
    assert y.shape == x.shape


def test_rotary_matches_complex_rotation() -> None:
    # Independent formulation: rotate pairs (x_i, x_{i+d/2}) by angle pos * theta_i.
    spec = load_spec(ROOT / "examples/rotary")
    x, cos, sin = spec.make_inputs((5, 2, 8), torch.float64, CPU, torch.Generator().manual_seed(0))
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half], x[..., half:])
    rot = torch.complex(cos[:, None, :half], sin[:, None, :half])
    w = z * rot
    torch.testing.assert_close(spec.reference(x, cos, sin), torch.cat((w.real, w.imag), dim=-1))


def test_cross_entropy_targets_are_random_class_ids() -> None:
    spec = load_spec(ROOT / "examples/cross_entropy")
    gen = torch.Generator().manual_seed(0)
    _logits, target = spec.make_inputs((33, 1000), torch.bfloat16, CPU, gen)
    assert target.dtype == torch.int64 and 0 <= int(target.min()) and int(target.max()) < 1000
    assert target.unique().numel() > 10
