"""`porter.patch(..., inplace=True)` on Hugging Face architectures built at toy size on a CPU:
profile the in-place groups, port them (interpreted tier), patch the model's own modules, and
check the output, `generate()`, the report and training-mode gradients."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import porter
from porter.model import inplace
from porter.model.load import build_hf
from porter.model.profile import profile_model
from porter.patching import PatchCheckError
from tests.porter.test_patch import _porter

transformers = pytest.importorskip("transformers")

ARCHS = ["llama", "qwen2", "mistral", "gemma", "qwen3"]


def _lm(arch: str, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    wrapper, (ids,), _ = build_hf(arch, size="toy", dtype=dtype)
    return wrapper.lm, ids


@pytest.fixture(scope="module")
def packs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The in-place groups of llama, gemma and qwen3 (the others share llama's), one profile
    with each group once, ported for h100 at the interpreted tier (~1 min on 2 cores)."""
    tmp = tmp_path_factory.mktemp("inplace")
    merged: dict[str, dict] = {}
    prof: dict = {}
    for arch in ("llama", "gemma", "qwen3"):
        model, inputs, source = build_hf(arch, size="toy")
        prof = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0,
                             in_place=True)
        assert prof["granularity"] == "modules"
        for g in prof["groups"]:
            if g["family"] in ("rowwise", "matmul_epilogue"):  # norms and the MLPs
                merged.setdefault(g["pack_name"], g)
    prof["groups"] = list(merged.values())
    path = tmp / "profile.json"
    path.write_text(json.dumps(prof))
    res = _porter("port-profile", str(path), "--top", str(len(merged)), "--targets", "h100",
                  "--out", str(tmp / "packs"), "--run-dir", str(tmp / "run"),
                  "--max-variants", "1", "--max-checks", "2")
    assert res.returncode == 0, res.stdout + res.stderr
    return tmp / "packs"


@pytest.mark.parametrize("arch", ARCHS)
def test_architecture_patched_in_place_keeps_generate(packs: Path, arch: str) -> None:
    from porter.packs.loader import PackFallbackWarning

    lm, ids = _lm(arch)
    with torch.no_grad():
        before = lm.generate(ids, max_new_tokens=4, do_sample=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)  # a silent reference run fails
        result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    assert result.model is lm and result.check is not None and result.check.passed
    replaced = {r.pack_name: r for r in result.replaced}
    norms = [r for r in replaced.values() if r.label == "rmsnorm"]
    mlps = [r for r in replaced.values() if r.label.startswith("linear_")]
    n_layers = lm.config.num_hidden_layers
    assert sum(r.places for r in norms) >= 2 * n_layers + 1, result.report()
    assert sum(r.places for r in mlps) == n_layers, result.report()
    for r in replaced.values():  # the report says what ran, and it was the kernel
        assert r.ran and all(v.startswith("kernel:") for v in r.ran.values()), result.report()
    # attention, the decoder layers and the model stay the model's own code
    for name, m in lm.named_modules():
        patched = "forward" in m.__dict__
        assert patched == any(name in r.modules for r in replaced.values()), name
        if name.endswith("self_attn") or name.endswith("layers.0") or name == "":
            assert not patched, name
    if arch == "qwen3":  # found without being listed: the q/k norms inside attention
        assert any("self_attn.q_norm" in m for r in norms for m in r.modules)
    with torch.no_grad():
        after = lm.generate(ids, max_new_tokens=4, do_sample=False)
    assert torch.equal(before, after)  # greedy tokens, fp32: the same
    # the decode steps (one token per row) ran the kernels too
    decoded = [(form, what) for r in norms for form, what in
               result.packs[r.pack_name].outcomes.items()
               if form.startswith(f"({ids.shape[0]}, 1,")]
    assert decoded and all(what.startswith("kernel:") for _, what in decoded)
    result.unpatch()
    assert not any("forward" in m.__dict__ for m in lm.modules())


@pytest.mark.parametrize("arch", ["llama", "gemma"])
def test_training_mode_gradients_are_the_unpatched_models(packs: Path, arch: str) -> None:
    lm, ids = _lm(arch)
    result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    assert result.replaced
    lm.train()
    lm(ids, labels=ids).loss.backward()
    patched = {n: p.grad.clone() for n, p in lm.named_parameters() if p.grad is not None}
    lm.zero_grad()
    result.unpatch()
    lm(ids, labels=ids).loss.backward()
    assert len(patched) == sum(1 for p in lm.parameters() if p.grad is not None)
    for n, p in lm.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(patched[n], p.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_a_pack_that_ran_its_reference_is_not_called_replaced(packs: Path) -> None:
    """bf16 activations, packs ported for fp32 only: every call runs the reference, and the
    report says so instead of "replaced"."""
    lm, ids = _lm("llama", torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    fell = [r for r in result.replacements if r.status == "fell back"]
    assert fell and not result.replaced, result.report()
    assert all(v.startswith("reference:") for r in fell for v in r.ran.values())
    assert "fell back" in result.report()


def test_a_failed_check_names_the_modules_that_differ(packs: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A norm kernel made wrong on purpose: the check fails, the model is left unpatched, and
    the error names the norms (and their pack), not the MLPs whose kernels are right."""
    real = inplace.pack_call

    def broken(packed, op):  # type: ignore[no-untyped-def]
        call = real(packed, op)
        return (lambda *a: call(*a) * 1.5) if packed.op.startswith("rmsnorm") else call

    monkeypatch.setattr(inplace, "pack_call", broken)
    lm, ids = _lm("llama")
    with pytest.raises(PatchCheckError) as err:
        porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    text = str(err.value)
    assert "model.layers.0.input_layernorm with rmsnorm_" in text, text
    assert "mlp" not in text, text
    assert "forward" not in lm.model.norm.__dict__  # unpatched


def test_patched_module_compiles_as_one_graph(packs: Path) -> None:
    lm, ids = _lm("llama")
    porter.patch(lm, packs, example_inputs=(ids,), inplace=True)
    norm = lm.model.norm
    x = torch.randn(2, 3, lm.config.hidden_size)
    torch._dynamo.reset()
    with torch.no_grad():
        explain = torch._dynamo.explain(norm)(x)
        assert explain.graph_break_count == 0
        torch.testing.assert_close(torch.compile(norm)(x), norm(x), rtol=1e-5, atol=1e-5)


def test_module_calls_skip_attention_layers_and_one_kernel_modules() -> None:
    lm, ids = _lm("llama")
    names = [c.name for c in inplace.module_calls(lm, (ids,))]
    assert "model.norm" in names and "model.layers.1.mlp" in names
    assert not [n for n in names if n.endswith(("self_attn", "layers.0", "gate_proj", "lm_head"))]


def test_a_module_with_functional_dropout_is_not_traced_for_patching() -> None:
    class Drop(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.dropout(x * 2, p=0.1, training=self.training)

    tm = inplace.trace_module(inplace.ModuleCall("drop", Drop().eval(), (torch.randn(4, 8),)))
    assert not tm.groups and "freeze its training flag" in tm.why_not


@pytest.mark.gpu
def test_untouched_kernels_same_before_and_after_on_gpu(packs: Path) -> None:
    """The profiler check on a GPU: what the patch does not replace keeps its time."""
    lm, ids = _lm("llama")
    lm, ids = lm.cuda(), ids.cuda()
    result = porter.patch(lm, packs, example_inputs=(ids,), inplace=True, judge=False)
    assert result.untouched is not None and result.untouched.before_us > 0
    assert "what the patch does not replace" in result.report()
