"""A size the generated kernel's trace pinned (a guard of the reference's on the example's
value) is found before any candidate is judged at a shape that does not have it: KernelBench 34
and 35 had their channels pinned to the interpreter's 8, and on an H100 every candidate then
raised the launcher's out-shape check at the file's 64 channels."""

from __future__ import annotations

from pathlib import Path

import torch

from porter.codegen import generate
from porter.loop import pinned_size

SPEC = '''
import torch

NAME = "pinned_s"

def reference(x):
    # a check on the channels, as InstanceNorm's forward does: the trace pins C to the example's
    if x.shape[1] != 8:
        x = x * 1.0
    return torch.softmax(x, dim=-1)

def make_inputs(shape, dtype, device, generator):
    x = torch.randn(*shape, generator=generator, device="cpu" if device.type != "meta" else "meta")
    return (x.to(device=device, dtype=dtype),)

SHAPES = [(4, 16, 64)]
DTYPES = [torch.float32]
INTERPRET_SHAPES = [(3, 8, 16)]
'''


def _ref(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] != 8:
        x = x * 1.0
    return torch.softmax(x, dim=-1)


def test_a_pinned_size_is_named() -> None:
    op = generate(_ref, (torch.randn(3, 8, 16),), name="pinned")
    assert pinned_size(op, (torch.empty(5, 8, 64, device="meta"),)) is None
    why = pinned_size(op, (torch.empty(4, 16, 64, device="meta"),))
    assert why is not None and "input 0's dim 1 fixed at 8" in why and "has 16" in why
    free = generate(lambda x: torch.softmax(x, dim=-1), (torch.randn(3, 8, 16),), name="free")
    assert pinned_size(free, (torch.empty(4, 16, 64, device="meta"),)) is None


def test_the_port_says_why_a_pinned_shape_gets_no_kernel(tmp_path: Path) -> None:
    from porter.port import port

    spec = tmp_path / "pinned_s.py"
    spec.write_text(SPEC)
    res = port(spec, ["h100"], None, run_dir=tmp_path / "run", progress=lambda line: None)
    (target,) = res.targets
    assert not target.choices
    assert any("input 0's dim 1 fixed at 8" in f and "has 16" in f for f in target.failures)
