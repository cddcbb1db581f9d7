"""Pack writing, manifest evidence and hashes, and `porter pack show`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from porter.pack import PackError
from porter.pack import PackIntegrityError
from porter.pack import bucket_distance
from porter.pack import read_manifest
from porter.pack import shape_bucket
from porter.pack import verify_files
from tests.porter.test_pack_helpers import make_pack


@pytest.mark.parametrize(("shape", "bucket"), [
    ((4096, 4096), "4096x4096"), ((2, 3, 1000), "8x1024"), ((7,), "7"), ((), "1"),
    ((1, 1), "1x1"), ((123, 781), "128x896"), ((16384, 5120), "16384x5120"),
    ((16384, 8192), "16384x8192"), ((4097, 1537), "8192x1792"), ((3, 4097), "4x5120"),
], ids=["pow2", "3d-collapsed", "1d", "scalar", "ones", "odd", "5120", "8192", "1537", "4097"])
def test_shape_bucket(shape: tuple[int, ...], bucket: str) -> None:
    assert shape_bucket(shape) == bucket


def test_bucket_distance() -> None:
    assert bucket_distance("64x256", "64x256") == 0
    assert bucket_distance("64x256", "4096x4096") > bucket_distance("64x512", "64x256")
    assert bucket_distance("8", "64x256") == float("inf")


def test_layout_and_manifest(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    assert pack == tmp_path / "packs" / "rmsnorm_t"
    m = read_manifest(pack)
    files = set(m["files"])
    assert "reference.py" in files
    assert any(f.startswith("nvidia/h100/") and f.endswith(".py") for f in files)
    assert any(f.startswith("amd/mi300x/") for f in files)
    assert any(f.startswith("apple/m4/") and f.endswith(".metal") for f in files)
    # every file on disk is listed with its real sha256, and nothing else is
    on_disk = {p.relative_to(pack).as_posix() for p in pack.rglob("*") if p.is_file()}
    assert on_disk - {"manifest.yaml"} == files
    for rel, digest in m["files"].items():
        assert hashlib.sha256((pack / rel).read_bytes()).hexdigest() == digest
    h100 = next(e for e in m["entries"] if e["target"] == "h100")
    assert h100["vendor"] == "nvidia" and h100["backend"] == "triton-cuda" and h100["arch"] == "90"
    assert h100["tier"] == "interpreted" and h100["hw_model_hash"] == "ab" * 32
    assert {(b["bucket"], b["dtype"]) for b in h100["buckets"]} == {
        ("4096x4096", "fp32"), ("64x256", "fp32"), ("4096x4096", "bf16")}
    b = h100["buckets"][0]
    assert b["numbers"]["label"] == "projected" and b["config"] == {"num_warps": 8}
    assert "num_warps': 8" in (pack / b["file"]).read_text()  # config baked into the source
    m4 = next(e for e in m["entries"] if e["target"] == "m4")
    assert m4["tier"] == "emitted"
    assert m["fusion"]["bytes_saved"] == 1024 and m["versions"]["torch"] == "x"


def test_rewrite_replaces_the_old_pack(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    (pack / "stale.txt").write_text("left over")
    make_pack(tmp_path)
    assert not (pack / "stale.txt").exists()


def test_tampered_file_is_named(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    m = read_manifest(pack)
    victim = next(f for f in m["files"] if f.startswith("amd/"))
    (pack / victim).write_text((pack / victim).read_text() + "\n# edited\n")
    verify_files(pack, m, ["reference.py"])  # untouched files still verify
    with pytest.raises(PackIntegrityError, match=victim.split("/")[-1]):
        verify_files(pack, m, sorted(m["files"]))


def test_not_a_pack(tmp_path: Path) -> None:
    with pytest.raises(PackError, match="no manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump({"format": "other/9"}))
    with pytest.raises(PackError, match="format"):
        read_manifest(tmp_path)


def test_pack_show(tmp_path: Path) -> None:
    from porter.commands.pack import pack as pack_group

    pack = make_pack(tmp_path)
    res = CliRunner().invoke(pack_group, ["show", str(pack)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any("h100" in ln and "interpreted" in ln and "projected" in ln and "71%" in ln
               for ln in lines)
    assert any("m4" in ln and "metal" in ln and "emitted" in ln for ln in lines)
    assert "files match" in res.output and "fusion:" in res.output
    victim = pack / read_manifest(pack)["entries"][0]["buckets"][0]["file"]
    victim.write_text("tampered")
    res = CliRunner().invoke(pack_group, ["show", str(pack)])
    assert res.exit_code == 2 and victim.name in res.output
