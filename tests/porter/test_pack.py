"""Pack writing, manifest evidence and hashes, and `porter pack show`."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from porter.packs.format import PackError
from porter.packs.format import PackIntegrityError
from porter.packs.format import bucket_distance
from porter.packs.format import shape_bucket
from porter.packs.verify import read_manifest
from porter.packs.verify import verify_files
from porter.packs.verify import verify_pack
from porter.packs.writer import check_out_dir
from porter.packs.writer import write_pack
from tests.porter.test_pack_helpers import make_pack
from tests.porter.test_pack_helpers import point_outside
from tests.porter.test_pack_helpers import port_result


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


def test_each_distinct_kernel_source_is_one_file_named_by_its_content(tmp_path: Path) -> None:
    """Buckets whose source is the same (a Triton module takes its config at launch) share one
    file `<op>.<sha12>.py`; the manifest's buckets point to it, the loader follows them."""
    from dataclasses import replace

    import porter

    result = port_result(tmp_path, targets=("h100",))
    (h100,) = result.targets
    same = h100.choices[0].source
    result = replace(result, targets=(replace(h100, choices=tuple(
        replace(c, source=same) for c in h100.choices)),))
    pack = write_pack(result, tmp_path / "packs").path
    m = read_manifest(pack)
    digest = hashlib.sha256(same.encode()).hexdigest()
    assert set(m["files"]) == {"reference.py", f"nvidia/h100/rmsnorm_t.{digest[:12]}.py"}
    buckets = m["entries"][0]["buckets"]
    assert len(buckets) == 3 and {b["file"] for b in buckets} == {f"nvidia/h100/rmsnorm_t."
                                                                  f"{digest[:12]}.py"}
    op = porter.load_pack(pack, device="h100")
    assert op.reference is not None and verify_pack(pack).ok


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
    digest = hashlib.sha256((pack / "manifest.yaml").read_bytes()).hexdigest()
    assert f"manifest sha256: {digest}" in res.output  # so the user can pin it
    victim = pack / read_manifest(pack)["entries"][0]["buckets"][0]["file"]
    victim.write_text("tampered")
    res = CliRunner().invoke(pack_group, ["show", str(pack)])
    assert res.exit_code == 2 and victim.name in res.output


def _targets(pack: Path) -> list[str]:
    return [e["target"] for e in read_manifest(pack)["entries"]]


def _intact(pack: Path) -> None:
    report = verify_pack(pack)
    assert report.ok, report.problems


# -- merging into an existing pack ----------------------------------------------------------
def test_port_of_another_target_keeps_the_first(tmp_path: Path) -> None:
    pack = write_pack(port_result(tmp_path, ("h100",)), tmp_path / "packs").path
    h100_files = {rel: digest for rel, digest in read_manifest(pack)["files"].items()
                  if rel.startswith("nvidia/")}
    written = write_pack(port_result(tmp_path, ("mi300x",), run="run2"), tmp_path / "packs")
    assert written.path == pack
    assert _targets(pack) == ["h100", "mi300x"]
    m = read_manifest(pack)
    assert h100_files and h100_files.items() <= m["files"].items()  # carried, same bytes
    _intact(pack)
    h100 = next(e for e in m["entries"] if e["target"] == "h100")
    assert h100["provenance"]["run_dir"].endswith("run")  # kept its own run, not the new one
    assert any("kept" in n and "h100" in n for n in written.notes)


def test_port_of_a_target_again_replaces_its_entry(tmp_path: Path) -> None:
    write_pack(port_result(tmp_path, ("h100", "mi300x")), tmp_path / "packs")
    pack = write_pack(port_result(tmp_path, ("h100",), h100_tier="compiled"),
                      tmp_path / "packs")
    m = read_manifest(pack.path)
    assert [e["tier"] for e in m["entries"]] == ["compiled", "interpreted"]
    assert any("replaced the pack's interpreted entry" in n for n in pack.notes)
    _intact(pack.path)


def test_port_with_no_passing_bucket_keeps_the_existing_entry(tmp_path: Path) -> None:
    pack = write_pack(port_result(tmp_path, ("h100", "mi300x")), tmp_path / "packs").path
    before = next(e for e in read_manifest(pack)["entries"] if e["target"] == "h100")
    written = write_pack(port_result(tmp_path, ("h100", "mi300x"), no_kernel=("h100",)),
                         tmp_path / "packs")
    after = next(e for e in read_manifest(pack)["entries"] if e["target"] == "h100")
    assert after["buckets"] == before["buckets"] and len(after["buckets"]) == 3
    assert any("h100" in n and "kept no kernel" in n for n in written.notes)
    _intact(pack)


def test_replace_writes_this_port_alone(tmp_path: Path) -> None:
    pack = write_pack(port_result(tmp_path, ("h100",)), tmp_path / "packs").path
    (pack / "stale.txt").write_text("left over")
    write_pack(port_result(tmp_path, ("mi300x",)), tmp_path / "packs", replace=True)
    assert _targets(pack) == ["mi300x"]
    assert not (pack / "nvidia").exists() and not (pack / "stale.txt").exists()
    _intact(pack)


def test_merge_refuses_a_tampered_pack(tmp_path: Path) -> None:
    pack = write_pack(port_result(tmp_path, ("h100", "mi300x")), tmp_path / "packs").path
    victim = next(p for p in (pack / "amd").rglob("*.py"))
    victim.write_text(victim.read_text() + "\n# edited\n")
    manifest_before = (pack / "manifest.yaml").read_bytes()
    with pytest.raises(PackIntegrityError, match=f"cannot merge.*{victim.name}.*--replace"):
        write_pack(port_result(tmp_path, ("h100",)), tmp_path / "packs")
    assert (pack / "manifest.yaml").read_bytes() == manifest_before  # nothing touched
    assert not list((tmp_path / "packs").glob(".*.writing-*"))  # no staging folder left behind
    write_pack(port_result(tmp_path, ("h100",)), tmp_path / "packs", replace=True)
    assert _targets(pack) == ["h100"]


@pytest.mark.parametrize("change", ["signature", "reference"])
def test_merge_refuses_another_op_under_the_same_name(tmp_path: Path, change: str) -> None:
    write_pack(port_result(tmp_path, ("h100",)), tmp_path / "packs")
    other = (port_result(tmp_path, ("mi300x",), signature=("tensor",)) if change == "signature"
             else port_result(tmp_path, ("mi300x",), reference="def reference(x, w):\n    "
                              "return x + w\n"))
    with pytest.raises(PackError, match="cannot merge.*--replace"):
        write_pack(other, tmp_path / "packs")
    assert _targets(tmp_path / "packs" / "rmsnorm_t") == ["h100"]
    write_pack(other, tmp_path / "packs", replace=True)
    assert _targets(tmp_path / "packs" / "rmsnorm_t") == ["mi300x"]


def test_a_folder_that_is_not_a_pack_is_never_deleted(tmp_path: Path) -> None:
    mine = tmp_path / "packs" / "rmsnorm_t"
    mine.mkdir(parents=True)
    (mine / "notes.txt").write_text("my own work")
    for replace in (False, True):
        with pytest.raises(PackError, match="not a pack"):
            write_pack(port_result(tmp_path, ("h100",)), tmp_path / "packs", replace=replace)
    assert (mine / "notes.txt").read_text() == "my own work"


@pytest.mark.parametrize("where", ["out", "parent"])
def test_out_pointing_at_a_file_fails_in_one_line(tmp_path: Path, where: str) -> None:
    afile = tmp_path / "packs.txt"
    afile.write_text("not a folder")
    out = afile if where == "out" else afile / "packs"
    with pytest.raises(PackError, match="not a folder|a file") as err:
        check_out_dir(out)
    assert "\n" not in str(err.value) and "--out" in str(err.value)
    with pytest.raises(PackError, match="not a folder|a file"):
        write_pack(port_result(tmp_path, ("h100",)), out)
    assert afile.read_text() == "not a folder"
    check_out_dir(tmp_path / "new" / "packs")  # not there yet: fine, it will be made


# -- paths that lead out of the pack --------------------------------------------------------
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_pack_show_refuses_a_path_outside(tmp_path: Path, how: str) -> None:
    from porter.commands.pack import pack as pack_group

    pack = make_pack(tmp_path)
    point_outside(pack, how)
    res = CliRunner().invoke(pack_group, ["show", str(pack)])
    assert res.exit_code == 2, res.output
    assert "files match" not in res.output
    assert "entries[0].buckets[0].file" in res.output and "out of the pack" in res.output


# -- porter pack verify ---------------------------------------------------------------------
def _verify(*args: str) -> tuple[int, str]:
    from porter.commands.pack import pack as pack_group

    res = CliRunner().invoke(pack_group, ["verify", *args])
    return res.exit_code, res.output


def test_pack_verify_intact_and_pinned(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    digest = hashlib.sha256((pack / "manifest.yaml").read_bytes()).hexdigest()
    code, out = _verify(str(pack))
    assert code == 0 and out.startswith("ok:") and digest in out, out
    code, out = _verify(str(pack), "--expect-sha256", digest)
    assert code == 0 and "pinned" in out, out


def test_pack_verify_expect_sha256_mismatch(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    code, out = _verify(str(pack), "--expect-sha256", "0" * 64)
    assert code == 1 and "not the pack you pinned" in out and "TAMPERED" in out, out


def test_pack_verify_lists_every_tampered_file(tmp_path: Path) -> None:
    pack = make_pack(tmp_path)
    m = read_manifest(pack)
    victims = [pack / f for f in m["files"] if f.startswith(("amd/", "apple/"))]
    for v in victims:
        v.write_text("tampered")
    code, out = _verify(str(pack))
    fails = [ln for ln in out.splitlines() if ln.startswith("FAIL")]
    assert code == 1 and len(fails) == len(victims) == 2, out
    assert all(any(v.name in ln for ln in fails) for v in victims)


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_pack_verify_refuses_a_path_outside(tmp_path: Path, how: str) -> None:
    pack = make_pack(tmp_path)
    point_outside(pack, how)
    code, out = _verify(str(pack))
    assert code == 1 and "out of the pack" in out and "TAMPERED" in out, out


@pytest.mark.parametrize("args", [["missing"], ["PACK", "--expect-sha256", "abc"],
                                  ["PACK_WITHOUT_MANIFEST"]],
                         ids=["no-folder", "bad-hash", "no-manifest"])
def test_pack_verify_bad_input_exits_2(tmp_path: Path, args: list[str]) -> None:
    pack = make_pack(tmp_path)
    (tmp_path / "empty").mkdir()
    subst = {"missing": str(tmp_path / "nope"), "PACK": str(pack),
             "PACK_WITHOUT_MANIFEST": str(tmp_path / "empty")}
    code, out = _verify(*[subst.get(a, a) for a in args])
    assert code == 2 and out.startswith("error:") and len(out.strip().splitlines()) == 1, out


def test_port_command_passes_replace(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`porter port --replace` reaches port() (which hands it to write_pack); default: merge."""
    import porter.port
    from porter.commands.port import port_cmd

    seen: list[bool] = []

    def fake_port(*args: object, replace_pack: bool = False, **kwargs: object) -> object:
        seen.append(replace_pack)
        raise porter.port.PortError("stop here")

    monkeypatch.setattr(porter.port, "port", fake_port)
    spec = tmp_path / "spec.py"
    spec.write_text("")
    for flags in ([], ["--replace"]):
        CliRunner().invoke(port_cmd, [str(spec), "--targets", "h100", "--run-dir",
                                      str(tmp_path / "run"), *flags])
    assert seen == [False, True]


def _write_rounds(result: Any, out_dir: str, rounds: int) -> None:
    from porter.packs.writer import write_pack

    for _ in range(rounds):
        write_pack(result, out_dir)


def test_two_writers_racing_keep_both_targets(tmp_path: Path) -> None:
    """Two ports writing different targets into one pack at once: the writer's lock around
    read-merge-swap keeps both entries every time (issue 48)."""
    import multiprocessing

    from porter.packs.verify import read_verified_pack
    from tests.porter.test_pack_helpers import port_result

    h100 = port_result(tmp_path, targets=("h100",), run="a")
    amd = port_result(tmp_path, targets=("mi300x",), run="b")
    out = tmp_path / "packs"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_rounds, args=(r, str(out), 6)) for r in (h100, amd)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
        assert p.exitcode == 0
    pack = read_verified_pack(out / "rmsnorm_t")
    assert {e["target"] for e in pack.manifest["entries"]} == {"h100", "mi300x"}


@pytest.mark.parametrize("bad", [{"BLOCK_N": "lots"}, {"num_warps": 4.0}, {"ROWS": True},
                                 {"num_warps": [4]}])
def test_a_config_value_of_the_wrong_type_is_refused_naming_the_field(tmp_path: Path,
                                                                      bad: dict[str, Any]) -> None:
    """BLOCK_N: "lots" passed verify, show and load_pack and failed at call time with a bare
    TypeError (issue 48): the manifest check names the entry, bucket and knob."""
    from porter.packs.loader import load_pack

    pack = make_pack(tmp_path)
    m = yaml.safe_load((pack / "manifest.yaml").read_text())
    m["entries"][0]["buckets"][0]["config"].update(bad)
    (pack / "manifest.yaml").write_text(yaml.safe_dump(m, sort_keys=False))
    key = next(iter(bad))
    with pytest.raises(PackError, match=rf"entries\[0\]\.buckets\[0\]\.config: {key}"):
        load_pack(pack, device="h100")
    r = CliRunner().invoke(_main(), ["pack", "show", str(pack)])
    assert r.exit_code == 2 and key in r.output


def _main():  # noqa: ANN202
    from porter.cli import main

    return main
