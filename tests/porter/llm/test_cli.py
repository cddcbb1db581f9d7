"""`porter port SPEC --agent claude` against the stub server, `porter port --replay RUN_DIR` with
networking disabled, and `--agent claude` without a key (one line, then the offline porter)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from porter.cli import main
from porter.packs.verify import read_manifest
from tests.porter.llm.helpers import PLAN
from tests.porter.llm.helpers import SPEC
from tests.porter.llm.helpers import Script
from tests.porter.llm.helpers import write
from tests.porter.llm.stub_server import StubServer


def _uncovered_spec(tmp_path: Path) -> Path:
    """The fixture spec as a cumulative max, which no template covers (its cumsum is covered by
    the scan template)."""
    spec = tmp_path / "cummax_spec.py"
    spec.write_text(SPEC.read_text().replace('"cumsum_t"', '"cummax_t"').replace(
        "torch.cumsum(x, dim=-1)", "torch.cummax(x, dim=-1).values"))
    return spec


def test_agent_without_a_key_says_so_and_runs_the_offline_porter(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "PORTER_LLM_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["port", str(_uncovered_spec(tmp_path)), "--agent", "claude",
                                    "--targets", "h100",
                                    "--out", str(tmp_path / "packs"),
                                    "--run-dir", str(tmp_path / "run")])
    notes = [line for line in res.output.splitlines() if "ANTHROPIC_API_KEY" in line]
    assert notes == ["note: --agent claude needs an Anthropic API key: ANTHROPIC_API_KEY is not "
                     "set; using the offline roles (templates, rules, the hardware model)"]
    # the offline porter then refuses the op no template covers, in one line, exit 2
    assert res.exit_code == 2, res.output
    assert "no code-generation template covers" in res.output
    assert "Traceback" not in res.output


def test_port_agent_claude_then_replay_offline(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    with StubServer(Script({"plan": [PLAN], "write_kernel": [write("good")]})) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        monkeypatch.setenv("PORTER_LLM_PARALLEL", "1")
        res = CliRunner().invoke(main, ["port", str(SPEC), "--agent", "claude", "--targets",
                                        "mi300x", "--out", str(tmp_path / "packs"),
                                        "--run-dir", str(run)])
    assert res.exit_code == 0, res.output
    assert "mi300x: interpreted (r1c1); stopped:" in res.output
    assert f"replay: porter port --replay {run}" in res.output
    assert read_manifest(tmp_path / "packs" / "cumsum_t")["entries"][0]["target"] == "mi300x"

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("networking is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delenv("ANTHROPIC_BASE_URL")
    monkeypatch.setenv("PORTER_LLM_MODEL", "claude-another")  # the replay uses the recorded one
    again = CliRunner().invoke(main, ["port", "--replay", str(run), "--out",
                                      str(tmp_path / "packs2"),
                                      "--run-dir", str(tmp_path / "replayed")])
    assert again.exit_code == 0, again.output
    assert f"replaying {run} (no network, no key)" in again.output
    assert (tmp_path / "replayed" / "mi300x" / "kernel.py").read_bytes() == \
        (run / "mi300x" / "kernel.py").read_bytes()
    summary = json.loads((tmp_path / "replayed" / "llm" / "summary.json").read_text())
    assert summary["targets"]["mi300x"]["kept"] == "r1c1"


def test_replay_of_a_folder_that_is_no_agent_run_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["port", "--replay", str(tmp_path), "--run-dir",
                                    str(tmp_path / "r")])
    assert res.exit_code == 2
    assert "not a recorded agent run (no llm/run.json)" in res.output


def test_an_uncovered_op_offline_points_to_the_agent(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["port", str(_uncovered_spec(tmp_path)), "--targets", "h100",
                                    "--out", str(tmp_path / "packs"), "--run-dir",
                                    str(tmp_path / "r")])
    assert res.exit_code == 2
    assert "no code-generation template covers" in res.output
    assert "--agent claude asks Claude to write it (docs/LLM.md)" in res.output
