"""Bound calls (porter.packs.bound): what a recording may be replayed as, and the replay itself.

The compiled kernels are stand-ins here (a CPU has none); the GPU test in test_loader_gpu.py
binds real ones."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field
from typing import Any

import torch

from porter.packs import bound


@dataclass
class FakeKernel:
    """Stands in for a CompiledKernel: `run` records what the replay launched."""

    name: str = "k"
    function: int = 7
    packed_metadata: tuple[int, ...] = ()
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def run(self, *args: Any) -> None:
        self.calls.append(args)

    def __hash__(self) -> int:
        return id(self)


def _recording(kernel: FakeKernel, x: torch.Tensor, scalar: int = 5) -> bound.Recording:
    """What a launcher `y = torch.empty_like(x); kernel[(4,)](x, y.view(-1), scalar)` records."""
    rec = bound.Recording()
    y = torch.empty_like(x)
    rec.allocations.append(y)
    rec.launches.append(bound.Launch(kernel, (4, 1, 1), [x, y.view(-1), scalar, None], None,
                                     (4,), (), {}))
    rec.result = y
    return rec


def test_two_alike_calls_bind_and_the_replay_swaps_in_the_new_tensors() -> None:
    k = FakeKernel()
    x1, x2 = torch.randn(4, 8), torch.randn(4, 8)
    a = bound.plan(_recording(k, x1), (x1,), None)
    b = bound.plan(_recording(k, x2), (x2,), None)
    assert not isinstance(a, str) and not isinstance(b, str)
    assert bound.same(a, b)
    call = bound.BoundCall(b, torch.device("cpu"), stream=lambda index: 99)
    x3 = torch.randn(4, 8)
    y = call((x3,), None)
    assert y.shape == x3.shape and y.dtype == x3.dtype and y.data_ptr() != x3.data_ptr()
    grid_and_stream, args = k.calls[-1][:4], k.calls[-1][9:]
    assert grid_and_stream == (4, 1, 1, 99)
    assert args == (x3.data_ptr(), y.data_ptr(), 5, None)


def test_out_tensors_are_where_the_kernels_write() -> None:
    k = FakeKernel()
    x, out = torch.randn(4, 8), torch.empty(4, 8)
    rec = bound.Recording()
    rec.launches.append(bound.Launch(k, (4, 1, 1), [x, out[1:]], None, (4,), (), {}))
    rec.result = out
    p = bound.plan(rec, (x,), out)
    assert not isinstance(p, str)
    assert p.slots == (((0, "in", 0, 0), (1, "out", 0, 8 * 4)),)
    o2 = torch.empty(4, 8)
    assert bound.BoundCall(p, torch.device("cpu"), stream=lambda i: 0)((x,), o2) is o2
    assert k.calls[-1][10] == o2.data_ptr() + 32


def test_what_a_replay_would_skip_is_not_bound() -> None:
    k = FakeKernel()
    x = torch.randn(4, 8)
    rec = bound.record(lambda: torch.zeros(3))  # an aten op a replay would skip
    assert "aten.zeros" in str(bound.plan(rec, (x,), None))
    assert "launched no Triton kernel" in str(bound.plan(bound.record(lambda: x.view(-1)),
                                                          (x,), None))
    stray = _recording(k, x)
    stray.launches[0].args[0] = torch.randn(4, 8)  # neither an input nor allocated by the call
    assert "neither received nor allocated" in str(bound.plan(stray, (x,), None))
    unwritten = _recording(k, x)
    unwritten.launches[0].args[1] = None
    assert "no kernel wrote" in str(bound.plan(unwritten, (x,), None))
    overlap = (x, x[1:])
    assert "overlap" in str(bound.plan(_recording(k, x), overlap, None))


def test_a_tma_descriptor_argument_is_not_bound() -> None:
    """A host TensorDescriptor holds its tensor: replayed as a fixed argument it would make every
    later call read the recorded call's tensors (the H200 Llama's MLP did, until this check)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    x = torch.randn(4, 8)
    rec = _recording(FakeKernel(), x)
    rec.launches[0].args[0] = TensorDescriptor.from_tensor(x, [4, 8])
    assert "TensorDescriptor that holds a tensor" in str(bound.plan(rec, (x,), None))


def test_a_scalar_that_changes_per_call_is_not_bound() -> None:
    k = FakeKernel()
    x = torch.randn(4, 8)
    a = bound.plan(_recording(k, x, scalar=1), (x,), None)
    b = bound.plan(_recording(k, x, scalar=2), (x,), None)
    assert not isinstance(a, str) and not isinstance(b, str)
    assert not bound.same(a, b)
    other = bound.plan(_recording(FakeKernel(), x, scalar=1), (x,), None)
    assert not isinstance(other, str) and not bound.same(a, other)  # another compiled kernel


def test_record_notes_allocations_and_views_only() -> None:
    x = torch.randn(4, 8)

    def launcher() -> torch.Tensor:
        y = torch.empty_like(x)
        y.view(2, 16)
        return y

    rec = bound.record(launcher)
    assert rec.foreign_ops == [] and len(rec.allocations) == 1
    assert rec.result.data_ptr() == rec.allocations[0].data_ptr()


def test_a_launch_hook_gets_what_tritons_jit_would_give_it() -> None:
    from triton import knobs

    k = FakeKernel()
    k.launch_metadata = lambda grid, stream, *args: {"name": "k", "grid": grid}  # type: ignore
    x = torch.randn(4, 8)
    p = bound.plan(_recording(k, x), (x,), None)
    assert not isinstance(p, str)
    call = bound.BoundCall(p, torch.device("cpu"), stream=lambda i: 0)
    seen: list[Any] = []
    hook = knobs.runtime.launch_enter_hook
    if not hasattr(hook, "add"):
        return  # a Triton without hook chains: nothing to listen with here
    hook.add(seen.append)
    try:
        call((x,), None)
    finally:
        hook.remove(seen.append)
    assert k.calls[-1][6] == {"name": "k", "grid": (4, 1, 1)}
    call((x,), None)
    assert k.calls[-1][6] is None  # no hook: the straight-line replay
