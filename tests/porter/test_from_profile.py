"""`porter port-profile`: a spec per top-ranked group, at the shapes and dtypes the model used."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from porter.from_profile import FromProfileError
from porter.from_profile import _dims
from porter.from_profile import _interpret_shape
from porter.from_profile import top_groups
from porter.from_profile import write_specs
from porter.model.load import load_model
from porter.model.profile import profile_model
from porter.specs import load_spec

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "llama_block" / "model.py"


@pytest.fixture(scope="module")
def prof() -> dict:
    torch.manual_seed(0)
    model, inputs, source = load_model(MODEL, size="toy")
    return profile_model(model, inputs, source=source, hw_name="h100", steps=1, warmup=0)


def test_dims_follow_broadcasting() -> None:
    assert _dims([2, 8, 64], [2, 8, 64]) == ["d0", "d1", "d2"]
    assert _dims([2, 8, 64], [64]) == ["d2"]
    assert _dims([2, 8, 64], [8, 1]) == ["d1", 1]
    assert _dims([16, 64], [128, 64]) == [128, "d1"]  # not aligned: a fixed size


def test_interpret_shapes_keep_rank_and_power_of_two() -> None:
    assert _interpret_shape((2, 8, 64)) == (2, 8, 64)  # small already: as the model ran it
    assert _interpret_shape((4, 2048, 4096)) == (2, 16, 1024)  # no size 1 the model lacks
    assert _interpret_shape((4, 2048, 5120)) == (2, 16, 1000)
    assert _interpret_shape((1, 2048, 4096)) == (1, 16, 1024)
    assert _interpret_shape((8192, 11008)) == (16, 1000)


def test_specs_load_and_mean_what_the_model_ran(prof: dict, tmp_path: Path) -> None:
    written = write_specs(prof, top=3, specs_dir=tmp_path)
    assert [w.pack_name for w in written] == [g["pack_name"] for g in prof["groups"][:3]]
    by_label = {g["label"]: g for g in prof["groups"]}
    for w in written:
        spec = load_spec(w.path)  # validates: make_inputs fits reference, reference runs
        assert spec.name == w.pack_name
        group = next(g for g in prof["groups"] if g["pack_name"] == w.pack_name)
        assert spec.shapes == tuple(tuple(i["inputs"][0]["shape"]) for i in group["instances"][:1])
        assert spec.dtypes == (torch.float32,)
    # the add + RMSNorm spec: the weight follows the row width; the reference is the model's
    spec = load_spec(next(w.path for w in written if w.pack_name.startswith("add_rmsnorm")))
    gen = torch.Generator().manual_seed(0)
    x, res, w = spec.make_inputs((3, 5, 64), torch.float32, torch.device("cpu"), gen)
    assert x.shape == res.shape == (3, 5, 64) and w.shape == (64,)
    s, y = spec.reference(x, res, w)
    r = x + res
    want = w * (r * torch.rsqrt(r.pow(2).mean(-1, keepdim=True) + 1e-6))
    torch.testing.assert_close(s, r)
    torch.testing.assert_close(y, want)
    assert by_label["add_rmsnorm"]["instances"][0]["outputs"][0]["shape"] == [2, 8, 64]


def test_top_must_be_positive_and_groups_must_exist(prof: dict) -> None:
    with pytest.raises(FromProfileError, match="--top"):
        top_groups(prof, 0)
    with pytest.raises(FromProfileError, match="no group the porter can take"):
        top_groups({"groups": [], "notes": ["torch.fx cannot trace X"]}, 2)
    assert len(top_groups(prof, 99)) == len(prof["groups"])


def test_porter_port_from_profile_option(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from porter.commands.port import port_cmd

    res = CliRunner().invoke(port_cmd, [])
    assert res.exit_code == 2 and "SPEC or --from-profile" in res.output
    res = CliRunner().invoke(port_cmd, ["x.py", "--from-profile", "p.json"])
    assert res.exit_code == 2 and "one of them" in res.output
    bad = tmp_path / "p.json"
    bad.write_text("[]")
    res = CliRunner().invoke(port_cmd, ["--from-profile", str(bad), "--top", "1",
                                        "--run-dir", str(tmp_path / "r")])
    assert res.exit_code == 2 and "not a profile written by `porter profile --out`" in res.output
