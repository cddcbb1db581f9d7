"""`porter.patch`: the whole flow on a CPU (profile, port the top 2 groups, patch, check), and the
patch's refusals."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import porter
from porter.model.load import load_model
from porter.model.profile import profile_model
from porter.model.report import save_profile
from porter.patching import PatchError
from porter.patching import _check

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "llama_block" / "model.py"


def _porter(*args: str) -> subprocess.CompletedProcess[str]:
    # a fresh process: the test session runs with TRITON_INTERPRET=1, and porting cross-compiles
    # in-process (see tests/porter/test_port.py)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "porter.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


@pytest.fixture(scope="module")
def ported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The example model profiled on the CPU and its top 2 groups ported for h100 at the
    interpreted tier (1 candidate, 2 checks per group: ~35 s on 2 cores)."""
    tmp = tmp_path_factory.mktemp("flow")
    torch.manual_seed(0)
    model, inputs, source = load_model(MODEL, size="toy")
    prof = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0)
    path = save_profile(prof, tmp / "profile.json")
    res = _porter("port-profile", str(path), "--top", "2", "--targets", "h100",
                  "--out", str(tmp / "packs"), "--run-dir", str(tmp / "run"),
                  "--max-variants", "1", "--max-checks", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    for g in prof["groups"][:2]:
        name = g["pack_name"]
        assert f"{name}: h100 interpreted; pack {tmp / 'packs' / name}" in res.stdout
        assert (tmp / "run" / "specs" / f"{name}.py").is_file()
    return tmp / "packs", prof


def test_profile_port_top2_patch_on_cpu(ported: tuple[Path, dict]) -> None:
    """The CI flow at toy sizes: profile, port the top 2 groups, patch, check the output."""
    from porter.packs.loader import PackFallbackWarning

    packs, prof = ported
    torch.manual_seed(0)
    model, inputs, _ = load_model(MODEL, size="toy")
    top2 = [g["pack_name"] for g in prof["groups"][:2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)  # a silent reference run fails
        result = porter.patch(model, packs, example_inputs=inputs)
        assert result.check is not None and result.check.passed, result.report()
        replaced = {r.pack_name: r for r in result.replaced}
        assert set(replaced) == set(top2)
        assert all("nothing can be timed" in r.reason for r in replaced.values())
        assert sum(r.places for r in replaced.values()) == sum(
            len(g["instances"]) for g in prof["groups"][:2])
        missing = [r for r in result.replacements if r.status == "no pack"]
        assert missing and all(r.pack_name not in top2 for r in missing)
        # the kernels ran: the pack's kernel module was executed (a reference fallback never
        # loads it)
        for name in top2:
            assert result.packs[name]._modules, f"{name}: the kernel module never ran"
        calls = [n for n in result.model.graph.nodes
                 if n.op == "call_function" and "kernel_porter" in str(n.target)]
        assert len(calls) == sum(r.places for r in replaced.values())
        # and the patched model runs under torch.compile as one graph, with the same output
        torch._dynamo.reset()
        with torch.no_grad():
            explain = torch._dynamo.explain(result.model)(*inputs)
            assert explain.graph_break_count == 0
            compiled = torch.compile(result.model)(*inputs)
            torch.testing.assert_close(compiled, model(*inputs), rtol=1e-5, atol=1e-5)
    assert "matches the unpatched one" in result.report()


def test_no_packs_no_replacement_and_errors(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, inputs, _ = load_model(MODEL, size="toy")
    with pytest.raises(PatchError, match="no such packs folder"):
        porter.patch(model, tmp_path / "nope", example_inputs=inputs)
    (tmp_path / "empty").mkdir()
    result = porter.patch(model, tmp_path / "empty", example_inputs=inputs)
    assert not result.replaced and result.check is None
    assert {r.status for r in result.replacements} == {"no pack"}
    with pytest.raises(PatchError, match="needs the model on a GPU"):
        porter.patch(model, tmp_path / "empty", example_inputs=inputs, judge=True)


def test_output_check_catches_a_wrong_replacement() -> None:
    torch.manual_seed(0)
    model, inputs, _ = load_model(MODEL, size="toy")

    class Off(torch.nn.Module):
        def forward(self, x):
            return model(x) * (1 + 1e-3)

    assert _check(model, model, inputs).passed
    bad = _check(model, Off(), inputs)
    assert not bad.passed and bad.max_abs_err > 0 and "fp32" in bad.tolerance


def test_a_replacement_slower_than_torch_compile_is_declined() -> None:
    from porter.patching import Replacement
    from porter.patching import _judged

    slow = Replacement("add_rmsnorm_x", "add_rmsnorm", 4, "no pack")
    assert not _judged(slow, ours_ms=0.074, compiled_ms=0.029)
    assert slow.status == "declined" and "slower than torch.compile" in slow.reason
    fast = Replacement("add_rmsnorm_x", "add_rmsnorm", 4, "no pack")
    assert _judged(fast, ours_ms=0.020, compiled_ms=0.029)
    assert "1.45x faster" in fast.reason
    from porter.patching import PatchResult

    text = PatchResult(torch.nn.Identity(), [slow]).report()
    assert text.startswith("declined  add_rmsnorm_x x4 (ours 74.0 us vs torch.compile 29.0 us)")


MLP = '''
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.fc = nn.Linear(d, h)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc(x)))


def get_init_inputs():
    return [64, 96]


def get_inputs():
    return [torch.randn(2, 8, 64)]
'''


def test_matmul_epilogue_group_ported_and_patched_with_2d_operands(tmp_path: Path) -> None:
    """Linear + bias + GELU as one matmul-epilogue kernel: 3-D activations flattened to the
    template's 2-D operands and back (~20 s)."""
    from porter.packs.loader import PackFallbackWarning

    (tmp_path / "mlp.py").write_text(MLP)
    torch.manual_seed(0)
    model, inputs, source = load_model(tmp_path / "mlp.py")
    prof = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0,
                         matmul_epilogues=True)
    labels = [g["label"] for g in prof["groups"]]
    assert sorted(labels) == ["linear_add", "linear_gelu"]
    gelu = next(g for g in prof["groups"] if g["label"] == "linear_gelu")
    assert gelu["family"] == "matmul_epilogue"
    assert [i["shape"] for i in gelu["instances"][0]["inputs"]] == [[16, 64], [96, 64], [96]]
    assert not prof["not_portable"]  # both Linears went into their groups
    path = save_profile(prof, tmp_path / "p.json")
    res = _porter("port-profile", str(path), "--top", "1", "--targets", "h100",
                  "--out", str(tmp_path / "packs"), "--run-dir", str(tmp_path / "run"),
                  "--max-variants", "1", "--max-checks", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    spec_text = (tmp_path / "run" / "specs" / f"{prof['groups'][0]['pack_name']}.py").read_text()
    assert "SHAPES = [(16, 64, 96)]" in spec_text or "SHAPES = [(16, 96, 64)]" in spec_text
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)
        result = porter.patch(model, tmp_path / "packs", example_inputs=inputs)
    assert result.check is not None and result.check.passed, result.report()
    assert [r.pack_name for r in result.replaced] == [prof["groups"][0]["pack_name"]]
    reshapes = [n for n in result.model.graph.nodes if n.op == "call_method"
                and n.target == "reshape"]
    assert reshapes  # operands flattened to 2-D and the result shaped back


def test_output_check_in_bf16_holds_the_patch_to_the_models_own_error() -> None:
    torch.manual_seed(0)
    model, inputs, _ = load_model(MODEL, size="toy_bf16")
    assert inputs[0].dtype == torch.bfloat16

    class Scaled(torch.nn.Module):
        def __init__(self, k: float) -> None:
            super().__init__()
            self.k = k

        def forward(self, x):
            return model(x) * self.k

    same = _check(model, model, inputs)
    assert same.passed and "fp32 run of the model" in same.tolerance
    assert not _check(model, Scaled(1.05), inputs).passed  # 5% off: far beyond bf16 roundings
