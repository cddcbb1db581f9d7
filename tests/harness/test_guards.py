"""Guards: the torch-compute allow-list and the completion check."""

from __future__ import annotations

import threading

import pytest
import torch

from harness import guards
from harness.selftest import load_kernels


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_interpreter_ops_are_allowed(dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real Triton launch under the interpreter runs aten ops of its own (copies to and from
    # host buffers); none of them may be mistaken for the kernel's math.
    k = load_kernels(interpret=True)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # interpreted kernels must run with it set
    x = torch.randn(5, 33).to(dtype)
    out = torch.empty_like(x)
    with guards.TorchOpRecorder() as rec:
        k.softmax_good(x, out=out)
    assert rec.ops, "the interpreter ran no aten op at all: the recorder saw nothing"
    assert guards.torch_compute_ops(rec.ops) == []
    torch.testing.assert_close(out.float(), torch.softmax(x.float(), -1), atol=1e-2, rtol=1e-2)


def test_math_ops_are_named() -> None:
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    out = torch.empty(4, 4)
    with guards.TorchOpRecorder() as rec:
        out.copy_(torch.mm(a, b) + a)  # copy_ is allowed, mm and add are not
    bad = guards.torch_compute_ops(rec.ops)
    assert bad == ["aten.add", "aten.mm"]
    assert guards.torch_compute_message(bad) == (
        "calls torch for the computation it claims to do: aten.add, aten.mm"
    )


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: torch.softmax(x, -1),
        lambda x: torch.nn.functional.rms_norm(x, (x.shape[-1],)),
        lambda x: x.sum(),
        lambda x: x.exp(),
    ],
    ids=["softmax", "rms_norm", "sum", "exp"],
)
def test_common_math_is_flagged(fn: object) -> None:
    x = torch.randn(3, 8)
    with guards.TorchOpRecorder() as rec:
        fn(x)  # type: ignore[operator]
    assert guards.torch_compute_ops(rec.ops), f"nothing flagged in {rec.ops}"


def test_views_and_allocation_are_allowed() -> None:
    x = torch.randn(4, 6)
    with guards.TorchOpRecorder() as rec:
        y = x.view(2, 12).t().contiguous()
        z = torch.empty_like(y)
        z.copy_(y)
        x.reshape(24)[3:9].unsqueeze(0).expand(2, 6).permute(1, 0)
    assert guards.torch_compute_ops(rec.ops) == []


def test_completion_catches_a_late_writer(monkeypatch) -> None:
    out = torch.full((16,), float("nan"))
    # The writer waits until the snapshot is taken (a fixed sleep raced it on a loaded CI
    # machine); the wait after the snapshot then joins it.
    snapshot_taken = threading.Event()
    wait_after_snapshot = guards.sync_everything

    def sync_after_snapshot(*args, **kwargs):
        snapshot_taken.set()
        return wait_after_snapshot(*args, **kwargs)

    monkeypatch.setattr(guards, "sync_everything", sync_after_snapshot)

    def late() -> None:
        snapshot_taken.wait(5.0)
        out.fill_(1.0)

    before = set(threading.enumerate())
    t = threading.Thread(target=late)
    t.start()
    msg = guards.completion_diff(out, torch.device("cpu"), cpu_wait_s=0.05, threads_before=before)
    t.join()
    assert msg is not None and "returned before the work finished" in msg and "16 of 16" in msg


def test_completion_passes_a_finished_output() -> None:
    out = torch.full((16,), float("nan"))
    out[:8] = 2.0  # NaN elements that stay NaN are "unchanged", not a late write
    assert guards.completion_diff(out, torch.device("cpu"), cpu_wait_s=0.01) is None


@pytest.mark.gpu
def test_completion_catches_a_side_stream_on_gpu() -> None:
    out = torch.full((1 << 20,), float("nan"), device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(50_000_000)
        out.fill_(1.0)
    msg = guards.completion_diff(out, torch.device("cuda"))
    assert msg is not None and "returned before the work finished" in msg
