"""The pack loader: entry choice by device/shape/dtype, fallbacks, integrity, the interpreter."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import pytest
import torch

import porter
from porter.packs.format import PackIntegrityError
from porter.packs.format import PackPathError
from porter.packs.loader import PackFallbackWarning
from porter.packs.loader import load_pack
from porter.packs.verify import manifest_sha256
from porter.packs.verify import read_manifest
from tests.porter.test_pack_helpers import launches
from tests.porter.test_pack_helpers import make_pack
from tests.porter.test_pack_helpers import point_outside


def _ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xf = x.double()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()).to(x.dtype)


def _inputs(shape: tuple[int, ...], dtype: torch.dtype = torch.float32, device: str = "cpu"):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(*shape, generator=gen, dtype=torch.float32).to(dtype).to(device)
    w = torch.randn(shape[-1], generator=gen, dtype=torch.float32).to(dtype).to(device)
    return x, w


def test_lazy_export() -> None:
    assert porter.load_pack is load_pack


@pytest.mark.parametrize(("device", "shape", "dtype", "target", "warps"), [
    ("h100", (4096, 4096), torch.float32, "h100", 8),
    ("h100", (64, 200), torch.float32, "h100", 4),  # nearest bucket 64x256
    # 64x256 is nearer, but its config was tuned for rows of at most 256: the wider one wins
    ("h100", (64, 300), torch.float32, "h100", 8),
    ("h100", (2, 2048, 4096), torch.bfloat16, "h100", 16),
    ("mi300x", (4096, 4096), torch.float32, "mi300x", 4),
], ids=["h100-big-fp32", "h100-small-fp32", "h100-wider-not-narrower", "h100-3d-bf16", "mi300x"])
def test_picks_entry_by_device_shape_dtype(tmp_path: Path, device: str, shape: tuple[int, ...],
                                           dtype: torch.dtype, target: str, warps: int) -> None:
    op = load_pack(make_pack(tmp_path), device=device)
    # meta tensors stand for tensors on the GPU: the choice needs only device, shape and dtype
    c = op.choose(*_inputs(shape, dtype, "meta"))
    assert c.runs_kernel and c.target == target and not c.interpret
    assert c.bucket["config"] == {"num_warps": warps}


@pytest.mark.parametrize(("device", "why"), [
    ("b200", "no entry for b200"),
    ("m4", "emitted"),  # Metal source was never checked: it must not run
], ids=["no-entry", "emitted-only"])
def test_unverified_or_missing_entry_falls_back(tmp_path: Path, device: str, why: str) -> None:
    op = load_pack(make_pack(tmp_path), device=device)
    c = op.choose(*_inputs((4096, 4096), torch.float32, "meta"))
    assert not c.runs_kernel and why in c.reason
    assert "reference (fallback)" in op.describe(*_inputs((8, 8), torch.float32, "meta"))


def test_compiled_only_entry_never_runs(tmp_path: Path) -> None:
    op = load_pack(make_pack(tmp_path, h100_tier="compiled"), device="h100")
    c = op.choose(*_inputs((4096, 4096), torch.float32, "meta"))
    assert not c.runs_kernel and "never checked" in c.reason


def test_cpu_runs_interpreter_and_matches_reference(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    op = load_pack(make_pack(tmp_path), device="cpu")
    x, w = _inputs((5, 200))
    assert "INTERPRETER" in op.describe(x, w)
    with warnings.catch_warnings(), launches(op) as ran:
        warnings.simplefilter("error", PackFallbackWarning)  # a fallback here would be a bug
        with caplog.at_level(logging.WARNING, logger="porter.packs.loader"):
            y = op(x, w)
            op(x, w)
    assert len(ran) == 2  # the kernel ran, not the (equally correct) reference
    torch.testing.assert_close(y, _ref(x, w), atol=1e-5, rtol=1e-5)
    interp_logs = [r for r in caplog.records if "INTERPRETER" in r.getMessage()]
    assert len(interp_logs) == 1
    out = torch.full_like(x, float("nan"))
    assert op(x, w, out=out) is out and not out.isnan().any()


def test_no_fitting_entry_warns_exactly_once(tmp_path: Path) -> None:
    op = load_pack(make_pack(tmp_path), device="cpu")
    x, w = _inputs((5, 200), torch.float16)  # the pack has no fp16 config
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y1 = op(x, w)
        y2 = op(x, w)
    fallback = [c for c in caught if issubclass(c.category, PackFallbackWarning)]
    assert len(fallback) == 1
    assert "fp16" in str(fallback[0].message) and "reference" in str(fallback[0].message)
    torch.testing.assert_close(y1, _ref(x, w), atol=2e-3, rtol=2e-3)
    assert torch.equal(y1, y2)


def test_cpu_without_interpreted_entries_falls_back(tmp_path: Path) -> None:
    op = load_pack(make_pack(tmp_path, h100_tier="compiled", cpu_ok=False))
    x, w = _inputs((5, 200))
    with pytest.warns(PackFallbackWarning, match="interpreted tier"):
        y = op(x, w)
    torch.testing.assert_close(y, _ref(x, w), atol=1e-5, rtol=1e-5)


def test_detects_cpu_by_default(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this test is about a machine without a GPU")
    op = load_pack(make_pack(tmp_path))
    assert "no known GPU detected" in op.describe()


def test_tampered_kernel_refuses_the_whole_pack(tmp_path: Path) -> None:
    """The rule: one changed file makes the pack tampered, refused whole, naming the file; it
    never falls back to the reference (not even for a device whose entry is intact)."""
    pack = make_pack(tmp_path)
    m = read_manifest(pack)
    rel = next(b["file"] for e in m["entries"] if e["target"] == "h100" for b in e["buckets"])
    path = pack / rel
    path.write_text(path.read_text().replace("1.0 / tl.sqrt", "1.01 / tl.sqrt"))
    for device in ("h100", "cpu", "mi300x", "b200"):
        with pytest.raises(PackIntegrityError, match=path.name):
            load_pack(pack, device=device)


def test_refuses_tampered_reference(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    (pack / "reference.py").write_text("def reference(x, w):\n    return x\n")
    with pytest.raises(PackIntegrityError, match="reference.py"):
        load_pack(pack, device="b200")


def test_custom_op_inside_torch_compile(tmp_path: Path) -> None:
    op = load_pack(make_pack(tmp_path), device="cpu", register_custom_op=True)
    x, w = _inputs((5, 200))

    @torch.compile(backend="aot_eager", fullgraph=True)
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return op.custom_op(a, b) * 2

    torch.testing.assert_close(f(x, w), _ref(x, w) * 2, atol=1e-5, rtol=1e-5)


def test_kernel_changed_after_load_never_runs(tmp_path: Path) -> None:
    """A kernel file edited between load_pack (which verified it) and the first call: the bytes
    that were verified run, not the edited file (the edit would double every output)."""
    pack = make_pack(tmp_path)
    op = load_pack(pack, device="cpu")
    for path in pack.rglob("*.py"):
        if path.name != "reference.py":
            path.write_text(path.read_text().replace("1.0 / tl.sqrt", "2.0 / tl.sqrt"))
    x, w = _inputs((5, 200))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PackFallbackWarning)  # the kernel must run, not a fallback
        y = op(x, w)
    torch.testing.assert_close(y, _ref(x, w), atol=1e-5, rtol=1e-5)
    # Triton compiles the text it reads through inspect, not the bytecode: that text is the
    # verified one too, although the file on disk now says otherwise.
    module = op._module(op.choose(x, w).bucket["file"], True)
    import inspect

    text = inspect.getsource(module._rmsnorm_kernel.fn)
    assert "1.0 / tl.sqrt" in text and "2.0 / tl.sqrt" not in text


def test_reference_changed_after_load_never_runs(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    op = load_pack(pack, device="cpu")
    (pack / "reference.py").write_text("def reference(x, w):\n    return x * 0\n")
    x, w = _inputs((5, 200), torch.float16)  # the pack has no fp16 config: the reference runs
    with pytest.warns(PackFallbackWarning):
        y = op(x, w)
    torch.testing.assert_close(y, _ref(x, w), atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
@pytest.mark.parametrize("field", ["bucket", "reference"])
def test_path_outside_the_pack_is_refused(tmp_path: Path, how: str, field: str) -> None:
    """A manifest naming a file outside the pack, with that file's true sha256, is refused at
    load time, naming the field and the path, and the outside file never runs."""
    pack = make_pack(tmp_path)
    marker = point_outside(pack, how, field)
    for device in ("cpu", "h100"):
        with pytest.raises(PackPathError,
                           match=r"manifest\.yaml: .*file.*leads out of the pack") as err:
            op = load_pack(pack, device=device)
            op(*_inputs((5, 200)))  # the old loader imported the file on the first call
        assert "\n" not in str(err.value)
    assert not marker.exists()


def test_expect_sha256_pins_the_manifest(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    pinned = manifest_sha256(pack)
    load_pack(pack, device="cpu", expect_sha256=pinned)
    load_pack(pack, device="cpu", expect_sha256="sha256:" + pinned.upper())
    # A consistent re-write of the pack (new file, new hash listed) passes every file check, but
    # is not the pack that was pinned.
    m = read_manifest(pack)
    m["notes"] = "re-written by someone else"
    import yaml

    (pack / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    load_pack(pack, device="cpu")
    with pytest.raises(PackIntegrityError, match="not the pack you pinned"):
        load_pack(pack, device="cpu", expect_sha256=pinned)
