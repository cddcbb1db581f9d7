"""The measured tier's evidence beyond the kept kernel (porter/judge/device.py): each other
kernel form's config as the module's own rule gives it at a bucket, timed there beside eager,
for the loader's estimate at shapes no bucket was ported for."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch

import hwmodels
from tests.porter.test_port import ROOT
from tests.porter.test_port import _porter


@functools.cache
def _module(name: str) -> Any:
    """A generated module (decorated under the interpreter: only its rules are asked)."""
    from porter.codegen import generate
    from porter.codegen.loading import load_generated_module

    if name == "softmax":
        op = generate(lambda x: torch.softmax(x, dim=-1), (torch.randn(4, 100),), name=name)
    else:
        op = generate(lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b),
                      (torch.randn(4, 100), torch.randn(100), torch.randn(100)), name=name)
    return load_generated_module(op.triton_module_source(), f"_judge_forms_{name}", True)


def _meta(rows: int, cols: int, n: int = 1) -> tuple[torch.Tensor, ...]:
    x = torch.empty(rows, cols, dtype=torch.bfloat16, device="meta")
    return (x, *(torch.empty(cols, dtype=torch.bfloat16, device="meta") for _ in range(n - 1)))


def test_form_configs_are_the_rules_configs_of_the_other_forms() -> None:
    """At a bucket where the kept kernel holds the row in one block, the other forms' configs
    are what the module's rule gives each on this device (the loader's derive_config with
    `form`): softmax's looped and split_coop at 32768 wide; layernorm's looped with VAR1 at
    8192 (its 16-bit rule); none of the kept form, and no split_coop over one chunk."""
    from porter.judge.device import form_configs

    h100 = hwmodels.get("h100")
    got = dict(form_configs(_module("softmax"), h100, _meta(4096, 32768), "one-block", "bf16"))
    assert set(got) == {"looped", "split_coop"}
    assert (got["looped"]["BLOCK_N"], got["looped"]["num_warps"]) == (8192, 8)
    assert (got["split_coop"]["SPLIT"], got["split_coop"]["dtype"]) == (2, "bf16")
    got = dict(form_configs(_module("softmax"), h100, _meta(4096, 8192), "one-block", "bf16"))
    assert set(got) == {"looped"}
    got = dict(form_configs(_module("layernorm"), h100, _meta(16384, 8192, 3), "one-block",
                            "bf16"))
    assert {k: got["looped"][k] for k in ("strategy", "BLOCK_N", "num_warps", "VAR1")} == {
        "strategy": "looped", "BLOCK_N": 4096, "num_warps": 8, "VAR1": True}
    # a kept looped kernel at a width the rule loops over: the one-block form has no config
    got = dict(form_configs(_module("softmax"), h100, _meta(4096, 65536), "looped", "bf16"))
    assert set(got) == {"split_coop"}
    # a HIP device has no split_coop kernel
    got = dict(form_configs(_module("softmax"), hwmodels.get("mi300x"), _meta(4096, 32768),
                            "one-block", "bf16"))
    assert set(got) == {"looped"}


def test_derive_config_for_a_form_says_why_there_is_none() -> None:
    from porter.packs.unseen import derive_config

    h100 = hwmodels.get("h100")
    config, how = derive_config(_module("softmax"), h100, _meta(4096, 65536), form="one-block")
    assert config is None and how == "rowwise_default has no one-block config for these inputs"
    # the module's rules are back after asking: the launcher's own is the embedded function
    assert _module("softmax").rowwise_default.__name__ == "rowwise_default"


@pytest.mark.gpu
def test_the_port_times_each_other_forms_rule_config_at_a_bucket(tmp_path: Path) -> None:
    """A device port of softmax at 4096 x 8192 bf16 keeps a one-block kernel and writes the
    looped form's rule config, timed beside eager, into the bucket's numbers."""
    from porter.packs.verify import read_manifest

    text = (ROOT / "examples" / "softmax" / "spec.py").read_text()
    text += "\nSHAPES = [(4096, 8192)]\nDTYPES = [torch.bfloat16]\n"
    (tmp_path / "spec.py").write_text(text)
    target = hwmodels.detect().model.name
    done = _porter("port", str(tmp_path / "spec.py"), "--targets", target, "--out",
                   str(tmp_path / "packs"), "--run-dir", str(tmp_path / "run"),
                   "--max-variants", "3")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    manifest = read_manifest(next((tmp_path / "packs").iterdir()))
    (bucket,) = [b for e in manifest["entries"] for b in e["buckets"]]
    forms = bucket["numbers"]["form_speedups"]
    assert bucket["config"]["strategy"] != "looped" and "looped" in forms
    assert forms["looped"]["config"]["strategy"] == "looped"
    assert forms["looped"]["speedup_vs_eager"] > 0 and forms["looped"]["time_ms"] > 0
