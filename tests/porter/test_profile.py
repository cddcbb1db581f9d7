"""`porter profile`: the example model's fused groups, the Amdahl ranking, one-line errors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from porter.model.graph import trace_model
from porter.model.groups import find_groups
from porter.model.load import load_model
from porter.model.profile import profile_model
from porter.model.rank import amdahl
from porter.model.rank import combined_gain
from porter.model.report import format_profile
from porter.model.report import read_profile
from porter.model.report import save_profile

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "llama_block" / "model.py"


@pytest.fixture(scope="module")
def toy() -> tuple[torch.nn.Module, tuple, dict]:
    torch.manual_seed(0)
    return load_model(MODEL, size="toy")


def test_groups_are_the_fused_groups_inductor_would_form(toy) -> None:
    model, inputs, _ = toy
    groups = find_groups(trace_model(model, inputs))
    fused = [g for g in groups if g.kind == "fused"]
    labels = [g.label for g in fused]
    # layer 0's input norm alone; then residual add + RMSNorm after attention and after the MLP
    # of every layer (the last one with the final norm), and SiLU-and-multiply per layer
    assert labels == ["rmsnorm", "add_rmsnorm", "silu_mul", "add_rmsnorm", "add_rmsnorm",
                      "silu_mul", "add_rmsnorm"]
    add_norms = [g for g in fused if g.label == "add_rmsnorm"]
    assert len({g.signature for g in add_norms}) == 1  # one pack serves all four
    g = add_norms[0]
    # the residual sum leaves the group (the next residual add reads it) beside the norm
    assert len(g.outputs) == 2 and g.ops[0] == "add" and g.ops[-1] == "mul"
    # the second residual add is NOT in the first group: it needs the MLP, which needs the group
    assert sum(op == "add" for op in g.ops) == 2  # the residual add and the "+ eps"
    opaque = {g.label: g.reason for g in groups if g.kind == "opaque"}
    assert "attention" in opaque["scaled_dot_product_attention"]
    assert all(g.reason.startswith("plain matmul") for g in groups if g.kind == "matmul")


def test_group_code_is_the_models_own_numerics(toy) -> None:
    from porter.patching import group_function

    model, inputs, _ = toy
    traced = trace_model(model, inputs)
    g = next(g for g in find_groups(traced) if g.label == "add_rmsnorm")
    # run the model node by node, keeping every value, and check the group's code reproduces
    # its outputs from its inputs
    values = {}

    class Keep(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = super().run_node(n)
            return values[n]

    with torch.no_grad():
        Keep(traced.module).run(*inputs)
        got = group_function(g.code)(*[values[i] for i in g.inputs])
    for o, v in zip(g.outputs, got, strict=True):
        torch.testing.assert_close(v, values[o], rtol=0, atol=0)


def test_amdahl() -> None:
    assert amdahl(0.5, 2.0) == pytest.approx(1 / 0.75)
    assert amdahl(0.0, 10.0) == 1.0
    assert amdahl(0.2, 1.0) == 1.0
    groups = [{"share": 0.2, "speedup": 2.0}, {"share": 0.1, "speedup": 4.0}]
    assert combined_gain(groups) == pytest.approx(1 / (1 - 0.3 + 0.1 + 0.025))
    with pytest.raises(ValueError):
        amdahl(0.5, 0.0)


def test_profile_on_cpu_ranks_by_gain_and_says_indicative(toy, tmp_path: Path) -> None:
    model, inputs, source = toy
    prof = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=1)
    assert prof["clock"] == "cpu" and any("indicative only" in n for n in prof["notes"])
    assert prof["ops"] and abs(sum(o["share"] for o in prof["ops"]) - 1) < 1e-6
    gains = [g["gain"] for g in prof["groups"]]
    assert gains == sorted(gains, reverse=True) and gains[0] > 1.0
    top = prof["groups"][0]
    assert top["label"] == "add_rmsnorm" and len(top["instances"]) == 4
    assert top["family"] == "rowwise" and top["ours_label"] == "projected"
    for g in prof["groups"]:
        assert g["gain"] == pytest.approx(amdahl(g["share"], g["speedup"]))
        assert g["speedup"] >= 1.0
    assert {e["op"] for e in prof["not_portable"]} == {"matmul", "scaled_dot_product_attention"}
    text = format_profile(prof)
    assert "indicative only" in text and "1/(1-f+f/s)" in text and "not taken" in text
    path = save_profile(prof, tmp_path / "p.json")
    assert read_profile(path)["groups"][0]["pack_name"] == top["pack_name"]
    json.loads(path.read_text())


def test_untraceable_model_lists_ops_and_says_why() -> None:
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent: torch.fx cannot trace it
                return torch.relu(x) * 2
            return x

    prof = profile_model(Branchy(), (torch.randn(4, 8).abs(),), source={"kind": "file"},
                         hw_name="h100", steps=1, warmup=0)
    assert prof["ops"] and prof["groups"] == []
    assert any("torch.fx cannot trace Branchy" in n for n in prof["notes"])


def test_cli_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    from porter.commands.profile import port_profile_cmd
    from porter.commands.profile import profile_cmd

    res = CliRunner().invoke(profile_cmd, [str(tmp_path / "nope.py")])
    assert res.exit_code == 2 and "nope.py" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(profile_cmd, [])
    assert res.exit_code == 2 and "MODEL" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    res = CliRunner().invoke(port_profile_cmd, [str(bad), "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "not a profile" in res.output


@pytest.mark.skipif(importlib.util.find_spec("transformers") is not None,
                    reason="transformers is installed here")
def test_hf_without_transformers_says_what_to_install() -> None:
    from porter.commands.profile import profile_cmd

    res = CliRunner().invoke(profile_cmd, ["--hf", "llama"])
    assert res.exit_code == 2
    assert res.output.strip() == ("error: --hf needs the transformers package: pip install "
                                  "'kernel-porter[models]'")


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                    reason="needs transformers (pip install 'kernel-porter[models]')")
def test_hf_llama_is_captured_by_dynamo_and_grouped() -> None:
    from porter.model.load import build_hf

    torch.manual_seed(0)
    model, inputs, source = build_hf("llama", size="toy")
    prof = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0)
    labels = {g["label"] for g in prof["groups"]}
    assert {"add_rmsnorm", "rmsnorm", "silu_mul"} <= labels
    assert "scaled_dot_product_attention" in {e["op"] for e in prof["not_portable"]}


def test_a_measured_pack_replaces_the_projected_speedup(toy, tmp_path: Path) -> None:
    import yaml

    model, inputs, source = toy
    prof = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0)
    top = prof["groups"][0]
    first = top["instances"][0]["inputs"][0]
    from porter.packs.format import shape_bucket

    pack = tmp_path / top["pack_name"]
    pack.mkdir()
    numbers = {"time_ms": top["instances"][0]["eager_ms"] / 2, "label": "measured"}
    (pack / "manifest.yaml").write_text(yaml.safe_dump({"entries": [{"target": "h100", "buckets": [
        {"bucket": shape_bucket(first["shape"]), "dtype": "fp32", "numbers": numbers}]}]}))
    again = profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0,
                          packs=tmp_path)
    g = next(g for g in again["groups"] if g["pack_name"] == top["pack_name"])
    assert g["ours_label"] == "measured pack"
    assert g["speedup"] == pytest.approx(2.0)  # every place measured at half its eager time


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_device_cuda_without_gpu_is_one_line() -> None:
    from porter.commands.profile import profile_cmd

    res = CliRunner().invoke(profile_cmd, [str(MODEL), "--device", "cuda"])
    assert res.exit_code == 2 and "no GPU" in res.output and res.output.count("\n") == 1
