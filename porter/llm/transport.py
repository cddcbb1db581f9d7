"""Getting a request to the model and its reply back, as verbatim JSON.

`Transport` is the seam: `send(request) -> response`, both plain JSON objects of the Messages
API. `SDKTransport` uses Anthropic's official SDK (a real key, or a local server through
`base_url`), with its own retries so each attempt is recorded; `porter.llm.record.ReplayTransport`
serves a recorded run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any
from typing import Protocol

from porter.errors import PorterError
from porter.llm.config import LLMConfig

try:
    import anthropic
except ImportError:  # the llm extra is not installed: --agent claude says so in one line
    anthropic = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

# Answers worth waiting for: rate limited, overloaded, and the server's transient failures.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 529})
MAX_RETRY_AFTER_S = 60.0


class TransportError(PorterError):
    """The API could not be reached or kept refusing; says what it answered and how often."""


class Transport(Protocol):
    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        """The reply to `request` (both Messages API JSON). Raises TransportError."""
        ...


class SDKTransport:
    """The official SDK, retries with exponential backoff on 429/529/5xx and lost connections.

    Args:
        config: model, key, base URL, retry policy.
        on_attempt: called with (request, response or None, error text or None) for every
            attempt, so that the recorder sees the 529 as well as the success after it.
        sleep: how to wait (tests pass a no-op).
    """

    def __init__(self, config: LLMConfig,
                 on_attempt: Callable[[dict[str, Any], dict[str, Any] | None, str | None], None]
                 | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        if anthropic is None:
            raise PorterError("--agent claude needs Anthropic's SDK: pip install "
                              "'kernel-porter[llm]' (or pip install anthropic)")
        self.config = config
        # max_retries=0: the SDK's own retries would hide the attempts from the record.
        self.client = anthropic.Anthropic(api_key=config.api_key, base_url=config.base_url,
                                          max_retries=0, timeout=600.0)
        self.on_attempt = on_attempt
        self.sleep = sleep
        self.retries = 0

    def send(self, request: dict[str, Any]) -> dict[str, Any]:
        delay = self.config.retry_base_s
        for attempt in range(self.config.max_retries + 1):
            try:
                raw = self.client.messages.with_raw_response.create(**request)
                response = json.loads(raw.http_response.text)
            except anthropic.APIStatusError as exc:
                text = f"HTTP {exc.status_code}: {_error_type(exc)}"
                self._tell(request, None, text)
                if exc.status_code not in RETRYABLE_STATUS or attempt == self.config.max_retries:
                    raise TransportError(f"the Anthropic API answered {text}"
                                         + (f" {attempt + 1} times" if attempt else "")) from None
                wait = _retry_after(exc) or delay
            except anthropic.APIConnectionError as exc:
                text = f"connection failed: {exc}"
                self._tell(request, None, text)
                if attempt == self.config.max_retries:
                    raise TransportError(f"the Anthropic API could not be reached at "
                                         f"{self.config.base_url or 'api.anthropic.com'}: {exc}"
                                         ) from None
                wait = delay
            else:
                self._tell(request, response, None)
                return response
            self.retries += 1
            log.info("LLM request: %s; retrying in %.1f s", text, wait)
            self.sleep(wait)
            delay *= 2
        raise AssertionError("unreachable")

    def _tell(self, request: dict[str, Any], response: dict[str, Any] | None,
              error: str | None) -> None:
        if self.on_attempt is not None:
            self.on_attempt(request, response, error)


def _error_type(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("type"):
            return f"{err['type']} ({err.get('message', '')})".replace(" ()", "")
    return type(exc).__name__


def _retry_after(exc: Any) -> float | None:
    try:
        value = float(exc.response.headers.get("retry-after", ""))
    except (AttributeError, TypeError, ValueError):
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER_S)
