"""One broken device YAML beside good ones: it is named (file and field), the others still work.

Each test points the registry at a copy of the shipped models in a temporary folder through
PORTER_HWMODELS_DIR and breaks one file there; the repo's own files are never touched.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

import hwmodels
from hwmodels import BrokenDeviceError
from hwmodels import HardwareModelError
from hwmodels import UnknownDeviceError
from hwmodels.catalog import Registry
from porter.cli import main
from porter.errors import PorterError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of every shipped model in a temporary folder the registry reads instead."""
    folder = tmp_path / "devices"
    folder.mkdir()
    for path in hwmodels.DEVICES_DIR.glob("*.yaml"):
        shutil.copy(path, folder / path.name)
    monkeypatch.setenv(hwmodels.DEVICES_DIR_ENV, str(folder))
    hwmodels.clear_cache()
    yield folder
    hwmodels.clear_cache()


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new, 1))


def _drop_line(path: Path, prefix: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(prefix)]
    assert len(kept) == len(lines) - 1, (path, prefix)
    path.write_text("".join(kept))


# How each kind of breakage is made in mi300x.yaml, and what the error must name.
BREAKAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "yaml-syntax": (
        lambda p: _edit(p, "vendor: amd\n", "vendor: [amd\n"),
        "invalid YAML (line",
    ),
    "wrong-type": (
        lambda p: _edit(p, "value: 5300,", "value: fast,"),
        "memory.bandwidth_gbps.value: must be a positive number",
    ),
    "missing-field": (
        lambda p: _drop_line(p, "boost_clock_mhz:"),
        "boost_clock_mhz: missing required key",
    ),
    "unknown-field": (
        lambda p: _edit(p, "boost_clock_mhz:", "boost_clock_mhz_typo:"),
        "boost_clock_mhz_typo: unknown key",  # the first problem met: the misspelt key
    ),
    "negative": (
        lambda p: _edit(p, "value: 5300,", "value: -3,"),
        "memory.bandwidth_gbps.value: must be a positive number, got -3",
    ),
}


@pytest.mark.parametrize("kind", sorted(BREAKAGES))
def test_broken_file_leaves_the_others_working(devices: Path, kind: str) -> None:
    breakage, expected = BREAKAGES[kind]
    breakage(devices / "mi300x.yaml")

    h100 = hwmodels.get("h100")
    assert Path(h100.source_file) == (devices / "h100.yaml").resolve()  # read from the folder
    assert hwmodels.get("sm_90") is h100
    assert {m.name for m in hwmodels.all_models()} == {
        "a100", "b200", "h100", "h200", "m4", "mi355x"
    }

    with pytest.raises(BrokenDeviceError) as info:
        hwmodels.get("MI300X")
    msg = str(info.value)
    assert "mi300x.yaml" in msg and expected in msg, msg
    assert "\n" not in msg
    # Whatever a caller already handles catches it: the CLI's PorterError, the lookup's
    # UnknownDeviceError, the loader's HardwareModelError.
    assert isinstance(info.value, PorterError)
    assert isinstance(info.value, UnknownDeviceError)
    assert isinstance(info.value, HardwareModelError)
    assert info.value.query == "MI300X" and "h100" in info.value.known

    [err] = hwmodels.broken()
    assert Path(err.path).name == "mi300x.yaml" and expected in str(err)


def test_registry_from_dir_loads_each_file_on_its_own(devices: Path) -> None:
    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")
    reg = Registry.from_dir(devices)  # the folder alone, no environment variable involved
    assert reg.get("h100").name == "h100"
    assert "mi300x" not in reg.names()
    with pytest.raises(BrokenDeviceError, match=r"mi300x\.yaml: memory\.bandwidth_gbps\.value"):
        reg.get("mi300x")
    assert reg.find("mi300x") is None
    assert reg.broken_error("gfx942") is reg.broken()[0]


def test_broken_file_answers_to_its_aliases(devices: Path) -> None:
    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")
    # gfx942 is an alias written in the broken file: still named as broken, not as unknown.
    with pytest.raises(BrokenDeviceError, match=r"mi300x\.yaml: memory\.bandwidth_gbps\.value"):
        hwmodels.get("gfx942")
    with pytest.raises(UnknownDeviceError) as info:
        hwmodels.get("rtx9090")
    assert not isinstance(info.value, BrokenDeviceError)


def test_ambiguous_alias_breaks_its_claimants_only(devices: Path) -> None:
    _edit(devices / "mi355x.yaml", "aliases: [", 'aliases: ["sm_90", ')  # h100's alias
    assert hwmodels.get("h200").name == "h200"  # the rest still load
    for name, other in (("mi355x", "h100.yaml"), ("h100", "mi355x.yaml")):
        with pytest.raises(BrokenDeviceError) as info:
            hwmodels.get(name)
        assert "ambiguous" in str(info.value) and other in str(info.value)
    with pytest.raises(BrokenDeviceError, match="'sm_90' is ambiguous"):
        hwmodels.get("sm_90")
    assert [Path(e.path).stem for e in hwmodels.broken()] == ["h100", "mi355x"]


def test_devices_dir_that_is_not_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(hwmodels.DEVICES_DIR_ENV, str(tmp_path / "nope"))
    with pytest.raises(HardwareModelError, match="PORTER_HWMODELS_DIR"):
        hwmodels.get("h100")


def test_cli_hw_list_shows_the_broken_file(devices: Path) -> None:
    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")
    result = CliRunner().invoke(main, ["hw", "list"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    rows = {line.split()[0]: line.split() for line in result.output.splitlines()[2:] if line}
    assert rows["h100"][1] == "nvidia"
    assert rows["mi300x"][1] == "BROKEN"
    assert "mi300x.yaml: memory.bandwidth_gbps.value: must be a positive number, got -3" in (
        result.output
    )


def test_cli_hw_validate_fails_naming_the_file(devices: Path) -> None:
    _edit(devices / "mi300x.yaml", "vendor: amd\n", "vendor: [amd\n")
    result = CliRunner().invoke(main, ["hw", "validate"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "6 models" in result.output
    assert "mi300x.yaml: invalid YAML (line" in result.output


def test_cli_hw_validate_checks_every_path(devices: Path) -> None:
    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")
    paths = [str(devices / "mi300x.yaml"), str(devices / "h100.yaml")]
    result = CliRunner().invoke(main, ["hw", "validate", *paths])
    assert result.exit_code == 2, result.output
    assert "(h100)" in result.output  # the good file after the broken one was still checked
    assert "mi300x.yaml: memory.bandwidth_gbps.value" in result.output


def test_cli_compile_good_target_works_and_broken_one_is_one_line(devices: Path) -> None:
    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")
    kernel = f"{REPO}/examples/rmsnorm/kernel.py::_rmsnorm_fwd_kernel"
    args = ["compile", kernel, "--constexpr", "BLOCK_N=1024", "--dtype", "bf16"]
    runner = CliRunner()

    result = runner.invoke(main, [*args, "--targets", "h100"])
    assert result.exit_code == 0, result.output
    assert any(line.split()[:2] == ["h100", "triton-cuda"] for line in result.output.splitlines())

    result = runner.invoke(main, [*args, "--targets", "h100,mi300x"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "mi300x.yaml: memory.bandwidth_gbps.value: must be a positive number" in result.output


def test_cli_port_good_target_works_and_broken_one_is_one_line(
    devices: Path, tmp_path: Path
) -> None:
    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")

    def port(target: str) -> object:
        return CliRunner().invoke(main, [
            "port", f"{REPO}/examples/rmsnorm/spec.py", "--targets", target,
            "--out", str(tmp_path / "packs"), "--run-dir", str(tmp_path / f"run-{target}"),
            "--store", str(tmp_path / "results.sqlite"),
        ])

    # m4: the cheapest whole port on a CPU (Metal source is emitted, nothing is interpreted).
    result = port("m4")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "packs" / "rmsnorm" / "manifest.yaml").is_file()

    result = port("mi300x")
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "mi300x.yaml: memory.bandwidth_gbps.value: must be a positive number" in result.output


def test_detect_names_the_broken_model_of_the_device_it_found(devices: Path) -> None:
    from hwmodels.detect import ProbeResult
    from hwmodels.detect import detect

    _edit(devices / "mi300x.yaml", "value: 5300,", "value: -3,")

    def probe() -> ProbeResult:
        return ProbeResult("fake", "AMD Instinct MI300X", "found it", "gfx942")

    d = detect([probe])
    assert d.model is None and d.device_name == "AMD Instinct MI300X"
    assert "did not load" in d.reason and "mi300x.yaml: memory.bandwidth_gbps.value" in d.reason
