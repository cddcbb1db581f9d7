"""An M4 entry of a pack: its dispatch in the manifest, run through a fake of PyTorch's MPS API
(`torch.mps.compile_shader`) that checks every call it receives and executes it on the CPU Metal
executor, on the executor directly for CPU tensors, and the reference where MPS is missing."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

import porter
from porter import mps
from porter.codegen import generate
from porter.packs.loader import PackFallbackWarning
from porter.packs.writer import write_pack
from porter.port import BucketChoice
from porter.port import PortResult
from porter.port import TargetResult
from targets import metal_host
from targets.metal_exec import MetalProgram
from targets.metal_exec import available
from targets.metal_exec import translate

pytestmark = pytest.mark.skipif(not available()[0], reason=available()[1])

REFERENCE = '''
import torch

def reference(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
'''
CONFIG = {"strategy": "metal", "threads": 64, "rows": 1, "vec": 4, "index": "i32",
          "dtype": "fp32"}


def _reference(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


@pytest.fixture(scope="module")
def source() -> str:
    x, w = torch.randn(4, 64), torch.randn(64)
    return generate(_reference, (x, w), name="rmsnorm_t").metal_source(CONFIG)


def _pack(tmp: Path, source: str, tier: str = "emulated") -> Path:
    spec = tmp / "spec.py"
    spec.write_text(REFERENCE)
    choice = BucketChoice(bucket="4096x4096", dtype="fp32", shape=(4096, 4096), config=CONFIG,
                          source=source, tier=tier,
                          numbers={"time_ms": 0.3, "p20_ms": 0.29, "p80_ms": 0.31,
                                   "label": "projected", "pct_of_peak": 80.0})
    m4 = TargetResult("m4", "apple", "metal", "apple-m4", "ef" * 32, "fp32: atol=1e-05",
                      (choice,))
    result = PortResult(op="rmsnorm_t", spec_path=spec, run_dir=tmp / "run", targets=(m4,),
                        versions={"torch": "x", "triton": "y"},
                        fusion={"text": "fused", "bytes_saved": 0},
                        signature=("tensor", "tensor"), reference_function="reference")
    return write_pack(result, tmp / "packs").path


class FakeMPS:
    """`torch.mps.compile_shader` as PyTorch defines it, checking what it is given.

    A kernel call is `lib.<kernel>(*args, threads=..., group_size=...)`: tensors are bound as
    buffers, Python ints as 64-bit integers; `threads` counts threads (dispatchThreads), so it
    must be a whole number of `group_size` groups here. The call then runs on the executor.
    """

    def __init__(self) -> None:
        self.sources: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def compile_shader(self, source: str) -> Any:
        self.sources.append(source)
        sigs = {k.name: k for k in translate(source).kernels}
        prog = MetalProgram(source)
        fake = self

        class Lib:
            def __getattr__(self, kernel: str) -> Any:
                assert kernel in sigs, f"no kernel {kernel} in the compiled source"

                def call(*args: Any, threads: Any = None, group_size: Any = None) -> None:
                    bufs = sigs[kernel].buffers()
                    assert len(args) == len(bufs)
                    for p, a in zip(bufs, args, strict=True):
                        if p.pointer:
                            assert isinstance(a, torch.Tensor), (p.name, type(a))
                        else:
                            assert type(a) is int and p.type == "long", (p.name, a, p.type)
                    assert isinstance(threads, list) and isinstance(group_size, list)
                    assert 1 <= len(threads) == len(group_size) <= 3
                    assert all(t % g == 0 for t, g in zip(threads, group_size, strict=True))
                    groups = [t // g for t, g in zip(threads, group_size, strict=True)]
                    fake.calls.append({"kernel": kernel, "threads": threads,
                                       "group_size": group_size, "args": args})
                    prog.launch(kernel, args, threadgroups=groups, threads=group_size)

                return call

        return Lib()


@pytest.fixture
def fake_mps(monkeypatch: pytest.MonkeyPatch) -> FakeMPS:
    fake = FakeMPS()
    monkeypatch.setattr(torch.mps, "compile_shader", fake.compile_shader, raising=False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    # CPU tensors stand in for "mps" ones: the runner takes the MPS path for them
    monkeypatch.setattr(mps, "backend_for", lambda device: "mps")
    return fake


def test_manifest_carries_the_dispatch(tmp_path: Path, source: str) -> None:
    pack = _pack(tmp_path, source)
    manifest = yaml.safe_load((pack / "manifest.yaml").read_text())
    (entry,) = manifest["entries"]
    (bucket,) = entry["buckets"]
    assert entry["tier"] == "emulated" and bucket["file"].endswith(".metal")
    d = bucket["dispatch"]
    assert d["kernel"] == "porter_rmsnorm_t" and d["index_bits"] == 32
    roles = [(b["index"], b["name"], b["role"]) for b in d["buffers"]]
    assert roles[0] == (0, "in0", "input") and ("out0", "output") in [(n, r) for _, n, r in roles]
    assert d["at_shape"]["launches"] == [{"kernel": "porter_rmsnorm_t",
                                          "threadgroups": [4096, 1, 1], "threads": [64, 1, 1]}]
    assert "unknown until measured" in bucket["numbers"]["expected_error"]


def test_mps_path_makes_the_calls_pytorch_expects(tmp_path: Path, source: str,
                                                  fake_mps: FakeMPS) -> None:
    pack = _pack(tmp_path, source)
    op = porter.load_pack(pack, device="m4")
    x, w = torch.randn(6, 96), torch.randn(96)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)  # a fallback would fail the test
        y = op(x, w)
    torch.testing.assert_close(y, _reference(x, w))
    (metal,) = (pack / "apple/m4").glob("*.metal")
    assert fake_mps.sources == [metal.read_text()]
    (call,) = fake_mps.calls
    assert call["kernel"] == "porter_rmsnorm_t"
    assert call["group_size"] == [64] and call["threads"] == [6 * 64]
    assert call["args"][0] is x and call["args"][4] is w  # buffers in the kernel's order
    out = torch.full_like(x, float("nan"))
    assert op(x, w, out=out) is out
    torch.testing.assert_close(out, _reference(x, w))
    assert len(fake_mps.sources) == 1 and len(fake_mps.calls) == 2  # compiled once


def test_reference_when_mps_is_missing(tmp_path: Path, source: str, fake_mps: FakeMPS,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(torch.mps, "compile_shader")
    op = porter.load_pack(_pack(tmp_path, source), device="m4")
    x, w = torch.randn(3, 64), torch.randn(64)
    with pytest.warns(PackFallbackWarning, match="no torch.mps.compile_shader"):
        y = op(x, w)
    torch.testing.assert_close(y, _reference(x, w))
    assert fake_mps.calls == []


def test_an_emitted_only_entry_never_runs(tmp_path: Path, source: str, fake_mps: FakeMPS) -> None:
    op = porter.load_pack(_pack(tmp_path, source, tier="emitted"), device="m4")
    x, w = torch.randn(3, 64), torch.randn(64)
    with pytest.warns(PackFallbackWarning, match="only reached tier 'emitted'"):
        op(x, w)
    assert fake_mps.calls == []


def test_cpu_tensors_run_on_the_executor(tmp_path: Path, source: str) -> None:
    op = porter.load_pack(_pack(tmp_path, source), device="m4")
    x, w = torch.randn(5, 200), torch.randn(200)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)
        y = op(x, w)
    torch.testing.assert_close(y, _reference(x, w))
    (runner,) = op._metal.values()
    assert runner.calls == 1  # the kernel ran, not the reference
    assert "CPU Metal executor" in op.describe(x, w)


def test_32_bit_kernel_refuses_a_buffer_it_cannot_address(source: str) -> None:
    disp = metal_host.parse(source)
    big = torch.empty_strided((2, 2), (2 ** 31, 1), device="meta")
    with pytest.raises(metal_host.DispatchError, match="32-bit indices"):
        metal_host.plan(disp, (big, torch.empty(2, device="meta")), [torch.empty(2, 2,
                                                                             device="meta")])


def test_pack_show_names_the_tier_and_the_unknown_error(tmp_path: Path, source: str) -> None:
    from porter.packs.format import summary_rows
    from porter.packs.format import tier_rank

    manifest = yaml.safe_load((_pack(tmp_path, source) / "manifest.yaml").read_text())
    (row,) = summary_rows(manifest)
    assert "emulated" in row
    assert any("projected" in str(c) and "error unknown" in str(c) for c in row)
    assert tier_rank("interpreted") < tier_rank("emulated") < tier_rank("measured")


def test_mps_sizes_for_a_2d_grid() -> None:
    ln = metal_host.Launch("k", (), (3, 5, 1), (128, 1, 1))
    assert mps.mps_sizes(ln) == ([384, 5], [128, 1])
    assert mps.mps_sizes(metal_host.Launch("k", (), (1, 1, 1), (1, 1, 1))) == ([1], [1])


def test_matmul_runs_through_the_fake_mps_on_a_2d_grid(fake_mps: FakeMPS) -> None:
    def linear_gelu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w.t() + b)

    x, w, b = torch.randn(40, 24), torch.randn(72, 24), torch.randn(72)
    src = generate(linear_gelu, (x, w, b), name="lin").metal_source(
        {"tile": 32, "bk": 8, "index": "i32", "dtype": "fp32"})
    runner = mps.MetalRunner(src)
    y = runner((x, w, b), None, linear_gelu)  # out allocated from the reference's meta shapes
    torch.testing.assert_close(y, linear_gelu(x, w, b), rtol=1e-4, atol=1e-4)
    (call,) = fake_mps.calls
    assert call["group_size"] == [128, 1] and call["threads"] == [3 * 128, 2]  # 3 x 2 tiles
