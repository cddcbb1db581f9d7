"""`port()` end to end with a hand-made GeneratedOp stand-in (real spec loader, targets, harness).

This pins the pipeline's own behaviour (tiers, shared interpreted checks, ledger resume, the pack)
independently of the template code generator; test_port.py runs the real generator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.porter.test_pack_helpers import METAL
from tests.porter.test_pack_helpers import MODULE

SPEC = '''
import torch

NAME = "rmsnorm_s"

def reference(x, w):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)

def make_inputs(shape, dtype, device, generator):
    x = torch.randn(*shape, generator=generator, device="cpu" if device.type != "meta" else "meta")
    w = torch.randn(shape[-1], generator=generator, device=x.device)
    return x.to(device=device, dtype=dtype), w.to(device=device, dtype=dtype)

SHAPES = [(4096, 4096), (16384, 1024)]
DTYPES = [torch.float32]
INTERPRET_SHAPES = [(7, 129), (3, 64)]
'''


class FakeGenerated:
    """What porter.codegen.generate returns, for the rmsnorm module in test_pack_helpers."""

    family = "rowwise"

    class fusion:  # noqa: N801 - a namespace standing in for FusionReport
        text = "pow, mean, rsqrt, mul, mul -> 1 kernel"
        bytes_saved = 123

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp

    def variant_space(self, hw: Any, shape: Any, dtype: Any) -> list[dict[str, int]]:
        return [{"num_warps": w} for w in (1, 2, 4, 8, 16, 32)]

    def default_config(self, hw: Any, shape: Any, dtype: Any) -> dict[str, int]:
        return {"num_warps": 4}

    def triton_module_source(self, config: dict[str, int]) -> str:
        return MODULE.format(config={"num_warps": 4})  # one body; launch knobs passed at launch

    def metal_source(self, config: dict[str, int]) -> str:
        return METAL

    def kernel_refs(self, inputs: Any, config: dict[str, int], source_path: str) -> list[Any]:
        from targets import KernelRef
        from targets import load_kernel

        path = self.tmp / "gen_module.py"
        if not path.exists():
            path.write_text(MODULE.format(config=config))
        fn = load_kernel(path, "_rmsnorm_kernel")
        dt = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[inputs[0].dtype]
        sig = {"x_ptr": f"*{dt}", "w_ptr": f"*{dt}", "y_ptr": f"*{dt}", "stride_x": "i32",
               "stride_y": "i32", "n_cols": "i32", "eps": "fp32", "BLOCK_N": "constexpr"}
        block = 1 << (int(inputs[0].shape[-1]) - 1).bit_length()
        return [KernelRef("_rmsnorm_kernel", fn, "", sig, {"BLOCK_N": block})]


@pytest.fixture()
def fake_codegen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import porter.port

    # a stand-in generator's Metal is a placeholder: test the emitted path, not the executor
    from porter.roles.benchmark import CPU_CHECKS
    monkeypatch.delitem(CPU_CHECKS, "emulator", raising=False)

    monkeypatch.setattr(porter.port, "generate_op", lambda ref, ex, name: FakeGenerated(tmp_path))
    spec = tmp_path / "spec.py"
    spec.write_text(SPEC)
    return spec


def test_port_with_standin(fake_codegen: Path, tmp_path: Path) -> None:
    from porter.packs.loader import load_pack
    from porter.port import port

    lines: list[str] = []
    run = tmp_path / "runs" / "r1"
    res = port(fake_codegen, ["h100", "a100", "mi300x", "m4"], tmp_path / "packs", run_dir=run,
               max_variants=3, progress=lines.append, verbose=True)
    by = {t.target: t for t in res.targets}
    assert by["h100"].tier == "interpreted" and by["mi300x"].tier == "interpreted"
    assert by["m4"].tier == "emitted" and by["m4"].backend == "metal"
    # one kernel body, checked once under the interpreter and shared by the other targets
    assert res.checks_run == 1 and res.checks_shared >= 3
    for t in ("h100", "a100", "mi300x"):
        for c in by[t].choices:
            assert c.numbers["label"] == "projected" and c.numbers["time_ms"] > 0
    assert (run / "h100" / "tuning_plan.json").is_file()
    cands = json.loads((run / "mi300x" / "candidates.json").read_text())
    assert all(len(v["candidates"]) <= 3 for v in cands.values())
    # 32 warps x 64 lanes cannot be a workgroup on MI300X: pruned before compiling, with why
    assert any(r["config"] == {"num_warps": 32} for v in cands.values() for r in v["rejected"])
    assert (run / "bench_results.csv").read_text().count("\n") > 8
    assert any("interpreter" in ln for ln in lines)

    # rerun with the same run dir: nothing is judged again
    again: list[str] = []
    res2 = port(fake_codegen, ["h100", "a100", "mi300x", "m4"], tmp_path / "packs", run_dir=run,
                max_variants=3, progress=again.append)
    assert res2.checks_run == 0
    assert not any("checking" in ln for ln in again)
    # not verbose: one line per (target, bucket, dtype), saying its candidates were judged
    assert sum("already judged" in ln for ln in again) == 8
    assert not any("  [" in ln for ln in again)  # no per-candidate lines
    assert [c.config for c in res2.targets[0].choices] == [c.config for c in res.targets[0].choices]

    # the pack runs on this CPU under the interpreter and matches the reference
    op = load_pack(res2.pack_path, device="cpu")
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(6, 300, generator=gen), torch.randn(300, generator=gen)
    ref = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
    torch.testing.assert_close(op(x, w), ref, atol=1e-5, rtol=1e-5)
