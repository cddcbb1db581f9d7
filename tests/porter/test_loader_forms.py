"""Every tensor a model hands a pack (issue 46): N-D activations, strided rows, 0 and 1 rows,
`out=`, on the CPU under the interpreter with a real generated module; and the port's check of
whether extra leading dims may be merged into rows (porter.packs.leading.probe)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import hwmodels
from porter.packs import leading
from porter.packs.loader import PackFallbackWarning
from porter.packs.loader import load_pack
from porter.packs.writer import write_pack
from porter.port import BucketChoice
from porter.port import PortResult
from porter.port import TargetResult
from tests.porter.test_pack_helpers import launches

REFERENCE = '''
import torch
import torch.nn.functional as F

def reference(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)
'''


def _rmsnorm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


@functools.lru_cache(maxsize=1)
def _generated() -> Any:
    from porter.codegen import generate

    return generate(_rmsnorm, (torch.randn(4, 100), torch.randn(100)), name="rmsnorm")


def _pack(tmp: Path, *, leading_dims: dict[str, Any] | None) -> Path:
    op = _generated()
    example = (torch.empty(64, 256), torch.empty(256))
    config = {**op.default_config(hwmodels.get("h100"), example), "dtype": "fp32"}
    choice = BucketChoice(bucket="64x256", dtype="fp32", shape=(64, 256), config=config,
                          source=op.triton_module_source(), tier="interpreted",
                          numbers={"time_ms": 0.01, "label": "projected"})
    spec = tmp / "spec.py"
    spec.write_text(REFERENCE)
    result = PortResult(op="rmsnorm_f", spec_path=spec, run_dir=tmp / "run",
                        targets=(TargetResult("h100", "nvidia", "triton-cuda", "90", "ab" * 32,
                                              "fp32: atol=1e-5", (choice,)),),
                        versions={}, fusion={}, signature=("tensor", "tensor"),
                        reference_function="reference", leading_dims=leading_dims)
    return write_pack(result, tmp / "packs").path


def _probe() -> dict[str, Any]:
    return leading.probe(_rmsnorm, (torch.randn(7, 129), torch.randn(129)))


FORMS = {
    "(batch, seq, hidden)": lambda: (torch.randn(2, 5, 256), torch.randn(256)),
    "(batch, heads, seq, dim)": lambda: (torch.randn(2, 2, 3, 256), torch.randn(256)),
    "strided rows": lambda: (torch.randn(6, 300)[:, :256], torch.randn(256)),
    "strided 3-D": lambda: (torch.randn(2, 4, 300)[:, :, :256], torch.randn(256)),
    "transposed batch": lambda: (torch.randn(5, 2, 256).transpose(0, 1), torch.randn(256)),
    "transposed last dim": lambda: (torch.randn(256, 6).t(), torch.randn(256)),
    "one row": lambda: (torch.randn(1, 256), torch.randn(256)),
    "one row, 3-D": lambda: (torch.randn(1, 1, 256), torch.randn(256)),
    "no rows": lambda: (torch.randn(0, 256), torch.randn(256)),
    "no rows, 3-D": lambda: (torch.randn(2, 0, 256), torch.randn(256)),
    "strided weight": lambda: (torch.randn(3, 256), torch.randn(512)[::2]),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_gets_the_reference_shape_and_values(tmp_path: Path, form: str) -> None:
    op = load_pack(_pack(tmp_path, leading_dims=_probe()), device="cpu")
    x, w = FORMS[form]()
    c = op.choose(x, w)
    assert c.runs_kernel and c.interpret, c.reason  # the kernel runs, not the reference
    import warnings

    with warnings.catch_warnings(), launches(op) as ran:
        warnings.simplefilter("error", PackFallbackWarning)
        got = op(x, w)
        out = torch.full_like(_rmsnorm(x, w), float("nan"))
        into = op(x, w, out=out)
    assert len(ran) == 2  # the kernel ran both calls, not the (equally right) reference
    want = _rmsnorm(x, w)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert into is out
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


def test_nd_inputs_without_the_ports_verdict_run_the_reference_with_a_reason(
        tmp_path: Path) -> None:
    """A pack whose reference was found not to take extra leading dims as rows (or written before
    the verdict existed, with inputs the launcher would misread) never returns a wrong shape."""
    verdict = {**_probe(), "flatten": False, "why": "the reference does not treat them as rows"}
    op = load_pack(_pack(tmp_path, leading_dims=verdict), device="cpu")
    x, w = torch.randn(2, 5, 256), torch.randn(256)
    with pytest.warns(PackFallbackWarning, match="does not treat them as rows"):
        got = op(x, w)
    assert got.shape == (2, 5, 256)
    torch.testing.assert_close(got, _rmsnorm(x, w))


def test_a_launcher_that_returns_the_wrong_shape_is_caught(tmp_path: Path) -> None:
    """With no verdict in the manifest (an old pack) a 2-D launcher handed (2, 5, 256) returns
    (2, 5): the loader compares with the reference's shape on meta tensors and runs it."""
    op = load_pack(_pack(tmp_path, leading_dims=None), device="cpu")
    x, w = torch.randn(2, 5, 256), torch.randn(256)
    with pytest.warns(PackFallbackWarning, match=r"returned \(2, 5\)"):
        got = op(x, w)
    assert got.shape == (2, 5, 256)


def test_probe_says_which_references_take_leading_dims_as_rows() -> None:
    assert _probe()["flatten"] and _probe()["rows"] == [0] and _probe()["ranks"] == [2, 1]
    logits, target = torch.randn(6, 10), torch.randint(0, 10, (6,))
    ce = leading.probe(lambda a, t: F.cross_entropy(a, t), (logits, target))
    assert not ce["flatten"] and ce["rows"] == [0, 1]  # a 3-D input's dim 1 is its classes
    by_dim1 = leading.probe(lambda a: torch.softmax(a, dim=1), (torch.randn(6, 10),))
    assert not by_dim1["flatten"]
    by_last = leading.probe(lambda a: torch.softmax(a, dim=-1), (torch.randn(6, 10),))
    assert by_last["flatten"]
    add = leading.probe(lambda a, r, w: F.rms_norm(a + r, (10,), w),
                        (torch.randn(6, 10), torch.randn(6, 10), torch.randn(10)))
    assert add["flatten"] and add["rows"] == [0, 1]


def test_inputs_the_launcher_refuses_run_the_reference_with_its_reason(tmp_path: Path) -> None:
    """A launcher that refuses a form with every config (the flat elementwise kernel and a
    strided view, seen on the H200) leaves the call to the reference, said once: no exception
    reaches the caller."""
    op = load_pack(_pack(tmp_path, leading_dims=_probe()), device="cpu")
    module = op._module(op.manifest["entries"][0]["buckets"][0]["file"], True)

    def refuse(*inputs: Any, out: Any = None, config: Any = None) -> Any:
        raise ValueError("the kernel needs contiguous tensors")

    module.launch = refuse
    x, w = torch.randn(3, 256), torch.randn(256)
    with pytest.warns(PackFallbackWarning, match="needs contiguous tensors"):
        got = op(x, w)
    torch.testing.assert_close(got, _rmsnorm(x, w))
