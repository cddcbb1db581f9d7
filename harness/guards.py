"""Guards that catch kernels which pass the numbers by cheating.

- `TorchOpRecorder` / `torch_compute_ops`: a TorchDispatchMode that records every aten op the
  candidate runs. A candidate that claims to be a kernel may allocate, view and move data with
  torch, but any math op means torch did the work ("calls torch for the computation it claims
  to do: aten.mm, aten.add").
- `completion_diff`: detects a candidate that returns before its work is finished (a
  background thread on CPU, an unsynchronized side stream on a GPU).

The stale-output guard (same tensors, contents changed in place) lives in `harness.check`,
because it needs the reference and the comparison.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops a kernel launcher may use: allocation, views/metadata, and plain data movement.
# Names are overload packets (`aten.view`, not `aten.view.default`).
ALLOWED_OPS: frozenset[str] = frozenset(
    {
        # allocation (launchers allocate outputs / workspaces)
        "aten.empty",
        "aten.empty_like",
        "aten.empty_strided",
        "aten.new_empty",
        "aten.new_empty_strided",
        # initialization of a workspace (e.g. zeroing an atomics accumulator) is not the op's math
        "aten.zero_",
        "aten.zeros",
        "aten.zeros_like",
        "aten.new_zeros",
        "aten.fill_",
        "aten.full",
        "aten.new_full",
        # views and metadata
        "aten.view",
        "aten._unsafe_view",
        "aten.reshape",
        "aten._reshape_alias",
        "aten.as_strided",
        "aten.t",
        "aten.transpose",
        "aten.permute",
        "aten.expand",
        "aten.unsqueeze",
        "aten.squeeze",
        "aten.slice",
        "aten.select",
        "aten.split",
        "aten.split_with_sizes",
        "aten.chunk",
        "aten.unbind",
        "aten.flatten",
        "aten.unflatten",
        "aten.alias",
        "aten.detach",
        "aten.view_as_real",
        "aten.view_as_complex",
        "aten.lift_fresh",
        "aten.is_contiguous",
        "aten.sym_size",
        "aten.sym_stride",
        "aten.sym_numel",
        "aten.sym_storage_offset",
        "aten.stride",
        "aten.size",
        "aten.dim",
        "aten.numel",
        "aten.is_same_size",
        # data movement (a copy is not the computation; dtype casts stay allowed because
        # launchers routinely cast inputs to the kernel's dtype)
        "aten.contiguous",
        "aten.clone",
        "aten.copy_",
        "aten._to_copy",
        "aten.to",
        # Triton interpreter (TRITON_INTERPRET=1) on CPU tensors: measured with a tiny
        # softmax kernel, it runs exactly aten.empty + aten.copy_ (it copies every tensor
        # argument into a host buffer and back), aten.new_empty (fresh storage for that
        # buffer) and aten.set_ (re-points the argument at its storage after the launch).
        "aten.set_",
    }
)


class TorchOpRecorder(TorchDispatchMode):
    """Records the aten overload packets of every op run inside the `with` block."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def torch_compute_ops(ops: list[str], allowed: frozenset[str] = ALLOWED_OPS) -> list[str]:
    """The ops in `ops` that compute (not in the allow-list), sorted and de-duplicated."""
    return sorted({op for op in ops if op not in allowed})


def torch_compute_message(bad_ops: list[str]) -> str:
    """The guard's failure text, naming the ops."""
    return "calls torch for the computation it claims to do: " + ", ".join(bad_ops)


def _flatten(out: Any) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def sync_current_stream(device: torch.device) -> None:
    """Wait for the current stream only (what a caller of a well-behaved kernel relies on)."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


# A late writer thread is waited for this long before its output is compared (see below).
CPU_THREAD_JOIN_S = 30.0


def sync_everything(device: torch.device, cpu_wait_s: float,
                    threads_before: set[threading.Thread] | None = None) -> None:
    """Wait for all streams of the device (GPU), or for late writers on the CPU.

    On the CPU, threads the candidate started and left running are joined (up to
    CPU_THREAD_JOIN_S each, so a machine under load cannot make a late writer look on time);
    then `cpu_wait_s` more for writers that hide elsewhere.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return
    if threads_before is not None:
        for t in set(threading.enumerate()) - threads_before:
            if t is not threading.current_thread():
                t.join(CPU_THREAD_JOIN_S)
    time.sleep(cpu_wait_s)


def completion_diff(out: Any, device: torch.device, cpu_wait_s: float = 0.05,
                    threads_before: set[threading.Thread] | None = None) -> str | None:
    """Check that `out` no longer changes after the candidate returned.

    Call right after the candidate returns. Synchronizes the current stream, snapshots the
    outputs, then waits for the whole device (or `cpu_wait_s` on CPU) and compares.

    Args:
        out: the tensor or tuple of tensors the candidate returned.
        device: where the outputs live.
        cpu_wait_s: how long a CPU run waits for late writers (background threads).
        threads_before: the threads alive before the call; on the CPU, those the call started
            and left running are joined before the comparison.

    Returns:
        None when nothing changed; otherwise the failure text naming how many elements changed.
    """
    sync_current_stream(device)
    tensors = _flatten(out)
    snapshots = [t.clone() for t in tensors]
    sync_everything(device, cpu_wait_s, threads_before)
    for i, (now, then) in enumerate(zip(tensors, snapshots, strict=True)):
        same = (
            (now == then) | (now.isnan() & then.isnan()) if now.is_floating_point() else now == then
        )
        if not bool(same.all()):
            changed = int((~same).sum())
            return (
                f"returned before the work finished: {changed} of {now.numel()} elements of "
                f"output {i} changed after the call returned and the current stream was synced"
            )
    return None
