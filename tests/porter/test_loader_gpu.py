"""The pack call on the GPU (issue 46): a real port, then every input form a model hands over,
and the bound launch (porter.packs.bound) giving the launcher's results on fresh inputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


def _ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x.float(), (x.shape[-1],), w.float(), eps=1e-6).to(x.dtype)


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory):
    import hwmodels
    from porter.packs.loader import load_pack
    from porter.port import port

    tmp = tmp_path_factory.mktemp("gpu_pack")
    name = hwmodels.detect().model.name
    result = port(REPO / "examples" / "rmsnorm" / "spec.py", [name], tmp / "packs",
                  run_dir=tmp / "run", units=[((64, 1024), torch.bfloat16),
                                              ((1, 4096), torch.bfloat16)])
    return load_pack(result.pack_path)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


FORMS = {
    "2-D": (64, 1024),
    "(batch, seq, hidden)": (2, 32, 1024),
    "(batch, heads, seq, dim)": (2, 4, 8, 1024),
    "one row": (1, 4096),
    "one row 3-D": (1, 1, 4096),
    "no rows": (0, 1024),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_forms_on_the_device(packed, form: str) -> None:
    shape = FORMS[form]
    w = torch.randn(shape[-1], device="cuda", dtype=torch.bfloat16)
    for _ in range(5):  # the first chooses, later ones bind: each on fresh inputs
        x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        _close(packed(x, w), _ref(x, w))
        out = torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)
        assert packed(x, w, out=out) is out
        _close(out, _ref(x, w))


def test_strided_rows_on_the_device(packed) -> None:
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    for _ in range(4):
        x = torch.randn(2, 32, 1100, device="cuda", dtype=torch.bfloat16)[..., :1024]
        _close(packed(x, w), _ref(x, w))


def test_the_bound_launch_is_what_runs_and_stays_right(packed) -> None:
    w = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        packed(x, w)
    assert "bound launch" in packed.describe(x, w), packed.describe(x, w)
    for _ in range(3):
        x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
        _close(packed(x, w), _ref(x, w))
    custom = packed.register_custom_op()
    _close(custom(x, w), _ref(x, w))


def test_a_tuned_shape_is_kept_and_run(packed, tmp_path: Path) -> None:
    from porter.packs.loader import load_pack

    tuner = load_pack(packed.path, tuning_cache=tmp_path)
    (tuned,) = tuner.tune([(300, 3000)], ["bf16"])
    again = load_pack(packed.path, tuning_cache=tmp_path)
    x = torch.randn(300, 3000, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(3000, device="cuda", dtype=torch.bfloat16)
    said = again.describe(x, w)
    assert "tuned on this device" in said, said
    for _ in range(3):
        _close(again(x, w), _ref(x, w))
    assert tuned.runs in ("kernel", "reference") and tuned.numbers["tried"] >= 1
