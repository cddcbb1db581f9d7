"""Settings of the LLM roles: which model, how much it may spend, when the loop stops.

Precedence, stated once: explicit overrides (CLI flags) > config file > environment > defaults.

The config file is TOML, `porter.toml` in the working directory (or the file `PORTER_LLM_CONFIG`
names), table `[llm]`::

    [llm]
    model = "claude-sonnet-4-6"
    max_tokens = 8192            # per reply
    token_budget = 400000        # input + output tokens over the whole run
    device_budget_s = 900        # seconds of judging (child processes) over the whole run
    parallel = 2                 # candidates written and judged at once per round
    stop_at_roofline = 0.8       # stop a target once a kept kernel reaches this share of peak
    patience = 2                 # stop after this many rounds without improvement
    max_rounds = 6
    max_attempts = 3             # tries per request for a malformed reply

Environment variables: `PORTER_LLM_<KEY>` for each key above (e.g. `PORTER_LLM_MODEL`), and
`ANTHROPIC_API_KEY` / `ANTHROPIC_BASE_URL` as the SDK reads them. The API key is never written
into the run folder (`resolved()` leaves it out).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import fields
from dataclasses import replace
from pathlib import Path
from typing import Any

from porter.errors import PorterError

ENV_PREFIX = "PORTER_LLM_"
CONFIG_ENV = "PORTER_LLM_CONFIG"
DEFAULT_FILE = "porter.toml"
KEY_ENV = "ANTHROPIC_API_KEY"
BASE_URL_ENV = "ANTHROPIC_BASE_URL"


class LLMConfigError(PorterError):
    """A setting of the LLM roles cannot be used; names the file or variable and the value."""


class NoAPIKeyError(PorterError):
    """`--agent claude` without ANTHROPIC_API_KEY: the caller falls back to the offline roles."""


@dataclass(frozen=True)
class LLMConfig:
    """Resolved settings of one run (see the module docstring for the keys and units)."""

    model: str = "claude-sonnet-4-6"
    max_tokens: int = 8192
    token_budget: int = 400_000
    device_budget_s: float = 900.0
    parallel: int = 2
    stop_at_roofline: float = 0.8
    patience: int = 2
    max_rounds: int = 6
    max_attempts: int = 3
    base_url: str | None = None
    api_key: str | None = None
    # Backoff for rate-limit (429) and overloaded (529) answers: first wait, doubled per retry.
    retry_base_s: float = 1.0
    max_retries: int = 5

    def resolved(self) -> dict[str, Any]:
        """What the run folder records: every setting except the key (only whether one is set)."""
        out = asdict(self)
        out["api_key"] = "set" if self.api_key else None
        return out


_INT = {"max_tokens", "token_budget", "parallel", "patience", "max_rounds", "max_attempts",
        "max_retries"}
_FLOAT = {"device_budget_s", "stop_at_roofline", "retry_base_s"}
_STR = {"model", "base_url"}
_FILE_KEYS = _INT | _FLOAT | _STR


def _parse(key: str, value: Any, where: str) -> Any:
    """One value checked and typed; LLMConfigError names `where` and the value."""
    if key in _STR:
        if not isinstance(value, str) or not value.strip():
            raise LLMConfigError(f"{where}: expected a non-empty string, got {value!r}")
        return value.strip()
    try:
        number = float(value) if key in _FLOAT else int(str(value).strip())
    except (TypeError, ValueError):
        kind = "a number" if key in _FLOAT else "a whole number"
        raise LLMConfigError(f"{where}: expected {kind}, got {value!r}") from None
    if not (number > 0 and math.isfinite(number)) and not (key == "retry_base_s" and number == 0):
        raise LLMConfigError(f"{where}: expected a positive value, got {value!r}")
    if key == "stop_at_roofline" and number > 1:
        raise LLMConfigError(f"{where}: a share of the roofline is at most 1, got {value!r}")
    return number


def _from_file(path: Path) -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10: settings come from the environment there
        raise LLMConfigError(f"{path}: reading a config file needs Python 3.11 or newer "
                             f"(tomllib); set {ENV_PREFIX}* variables instead") from None
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LLMConfigError(f"{path}: cannot read it as TOML: {exc}") from None
    table = data.get("llm", {})
    if not isinstance(table, dict):
        raise LLMConfigError(f"{path}: [llm] must be a table")
    unknown = sorted(set(table) - _FILE_KEYS)
    if unknown:
        raise LLMConfigError(f"{path}: [llm] has unknown key(s) {', '.join(unknown)}; known: "
                             f"{', '.join(sorted(_FILE_KEYS))}")
    return {k: _parse(k, v, f"{path}: llm.{k}") for k, v in table.items()}


def load_config(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> LLMConfig:
    """The settings: overrides > file > environment > defaults.

    Args:
        path: the TOML file; None: `PORTER_LLM_CONFIG`, else `porter.toml` if it exists.
        env: the environment (default: os.environ).
        overrides: values from CLI flags; None values are ignored.

    Returns:
        An `LLMConfig`; `api_key` is None when no key is set (see `require_key`).

    Raises:
        LLMConfigError: a bad value, naming the file key or the variable.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for key in sorted(_FILE_KEYS):
        text = env.get(ENV_PREFIX + key.upper())
        if text is not None and text.strip():
            values[key] = _parse(key, text, f"{ENV_PREFIX}{key.upper()}={text!r}")
    if env.get(BASE_URL_ENV, "").strip():
        values.setdefault("base_url", env[BASE_URL_ENV].strip())
    file = Path(path) if path is not None else (
        Path(env[CONFIG_ENV]) if env.get(CONFIG_ENV) else Path(DEFAULT_FILE))
    if path is not None or env.get(CONFIG_ENV):
        if not file.is_file():
            raise LLMConfigError(f"{file}: no such config file")
    if file.is_file():
        values.update(_from_file(file))
    for key, value in (overrides or {}).items():
        if value is not None:
            if key not in {f.name for f in fields(LLMConfig)}:
                raise LLMConfigError(f"unknown LLM setting {key!r}")
            values[key] = value if key == "api_key" else _parse(key, value, f"--{key}")
    key = env.get(KEY_ENV, "").strip() or None
    return replace(LLMConfig(**values), api_key=values.get("api_key", key))


def recorded_config(run_dir: str | os.PathLike[str]) -> LLMConfig:
    """The settings a recorded run used (`<run>/llm/config.json`), for its replay: the same
    model, budgets and parallel candidates make the same requests. No key, no base URL.

    Raises:
        LLMConfigError: the file is missing or not a config.
    """
    import json

    path = Path(run_dir) / "llm" / "config.json"
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LLMConfigError(f"{path}: cannot read the recorded settings: {exc}") from None
    known = {f.name for f in fields(LLMConfig)} - {"api_key", "base_url"}
    return LLMConfig(**{k: v for k, v in raw.items() if k in known})


def require_key(config: LLMConfig) -> LLMConfig:
    """`config` when it has an API key or a base URL of a local server; else NoAPIKeyError."""
    if config.api_key:
        return config
    if config.base_url and _is_loopback(config.base_url):
        return replace(config, api_key="local-server")  # a stub server takes any key
    raise NoAPIKeyError(f"--agent claude needs an Anthropic API key: {KEY_ENV} is not set; "
                        "using the offline roles (templates, rules, the hardware model)")


def _is_loopback(url: str) -> bool:
    from urllib.parse import urlparse

    host = urlparse(url).hostname or ""
    return host in {"127.0.0.1", "localhost", "::1"}
