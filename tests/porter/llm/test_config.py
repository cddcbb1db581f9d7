"""LLM settings: overrides > file > environment > defaults; bad values named; no key -> offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.llm.config import LLMConfig
from porter.llm.config import LLMConfigError
from porter.llm.config import NoAPIKeyError
from porter.llm.config import load_config
from porter.llm.config import require_key


def test_defaults_without_file_or_environment(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(env={})
    assert cfg == LLMConfig()
    assert cfg.api_key is None and cfg.resolved()["api_key"] is None


def test_precedence_overrides_then_file_then_environment(tmp_path: Path) -> None:
    file = tmp_path / "porter.toml"
    file.write_text('[llm]\nmodel = "claude-from-file"\nparallel = 3\n')
    env = {"PORTER_LLM_MODEL": "claude-from-env", "PORTER_LLM_PATIENCE": "5",
           "PORTER_LLM_PARALLEL": "7", "ANTHROPIC_API_KEY": "sk-secret"}
    cfg = load_config(file, env=env, overrides={"parallel": 4, "max_rounds": None})
    assert (cfg.model, cfg.parallel, cfg.patience, cfg.max_rounds) == ("claude-from-file", 4, 5, 6)
    assert cfg.api_key == "sk-secret"
    assert "sk-secret" not in str(cfg.resolved())  # never written into the run folder


@pytest.mark.parametrize(("where", "text", "expect"), [
    ("env", "PORTER_LLM_PARALLEL=two", "PORTER_LLM_PARALLEL='two': expected a whole number"),
    ("env", "PORTER_LLM_STOP_AT_ROOFLINE=1.5", "a share of the roofline is at most 1"),
    ("file", "tokens = 3", "unknown key(s) tokens"),
    ("file", "token_budget = -1", "llm.token_budget: expected a positive value"),
], ids=["env-not-a-number", "env-share-over-1", "file-unknown-key", "file-negative"])
def test_bad_values_are_named(tmp_path: Path, where: str, text: str, expect: str) -> None:
    file = tmp_path / "porter.toml"
    env: dict[str, str] = {}
    if where == "env":
        key, value = text.split("=", 1)
        env[key] = value
        file.write_text("")
    else:
        file.write_text(f"[llm]\n{text}\n")
    with pytest.raises(LLMConfigError, match=expect.replace("(", r"\(").replace(")", r"\)")):
        load_config(file, env=env)


def test_no_key_is_one_line_naming_the_offline_fallback() -> None:
    with pytest.raises(NoAPIKeyError) as err:
        require_key(LLMConfig())
    assert "ANTHROPIC_API_KEY" in str(err.value) and "offline roles" in str(err.value)
    assert "\n" not in str(err.value)
    # a local server (the tests' stub) needs no key
    assert require_key(LLMConfig(base_url="http://127.0.0.1:9")).api_key
    with pytest.raises(NoAPIKeyError):
        require_key(LLMConfig(base_url="https://api.example.com"))
