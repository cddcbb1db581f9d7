"""One request to the model for one role and one target, with its reply checked before use.

`LLMClient.ask(role, hw, **context)` renders the role's prompt (porter.llm.prompts), sends it
with every tool declared and the role's tool forced, checks the tool's input (porter.llm.tools),
and on a malformed reply asks again, telling the model what was wrong, up to `max_attempts`
times within the token budget. Every attempt is recorded (porter.llm.record) and counted
(`Usage`): tokens in and out, cache writes and reads, and what they cost.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict
from dataclasses import dataclass
from typing import Any

from porter.errors import PorterError
from porter.llm.config import LLMConfig
from porter.llm.prompts import language_of
from porter.llm.prompts import render
from porter.llm.record import Recorder
from porter.llm.tools import TOOLS
from porter.llm.tools import ReplyError
from porter.llm.tools import validate
from porter.llm.transport import Transport

log = logging.getLogger(__name__)

# USD per million tokens by model family: input, output, cache write (5-minute), cache read.
# List prices of the 4.x generation (Opus 4.5+, Sonnet 4.x, Haiku 4.5); an estimate, labelled so
# in the summary. A model of no listed family is priced as Sonnet.
PRICES: dict[str, tuple[float, float, float, float]] = {
    "claude-opus": (5.0, 25.0, 6.25, 0.5),
    "claude-sonnet": (3.0, 15.0, 3.75, 0.3),
    "claude-haiku": (1.0, 5.0, 1.25, 0.1),
}
TOOL_ORDER = ("write_kernel", "diagnose", "plan", "propose_variants")


class BudgetExhausted(PorterError):
    """The run's token budget is spent; the loop stops and says so."""


@dataclass
class Usage:
    """Tokens and requests of a run (or a role); `add` merges another's."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    malformed: int = 0  # replies that broke the output contract and were asked again

    @property
    def total_tokens(self) -> int:
        return (self.input_tokens + self.output_tokens + self.cache_write_tokens
                + self.cache_read_tokens)

    def add_reply(self, usage: dict[str, Any]) -> None:
        self.requests += 1
        self.input_tokens += int(usage.get("input_tokens") or 0)
        self.output_tokens += int(usage.get("output_tokens") or 0)
        self.cache_write_tokens += int(usage.get("cache_creation_input_tokens") or 0)
        self.cache_read_tokens += int(usage.get("cache_read_input_tokens") or 0)

    def cost_usd(self, model: str) -> float:
        key = next((k for k in PRICES if model.startswith(k)), "claude-sonnet")
        p_in, p_out, p_write, p_read = PRICES[key]
        return (self.input_tokens * p_in + self.output_tokens * p_out
                + self.cache_write_tokens * p_write + self.cache_read_tokens * p_read) / 1e6

    def to_json(self, model: str) -> dict[str, Any]:
        return {**asdict(self), "total_tokens": self.total_tokens,
                "cost_usd_estimate": round(self.cost_usd(model), 4)}


@dataclass(frozen=True)
class Reply:
    """A checked reply: the tool's input, and the exchanges (seq numbers) it took."""

    role: str
    tool: str
    data: dict[str, Any]
    attempts: int
    prompt_chars: int  # system + user text of the first attempt, for the cost estimate


class LLMClient:
    """Asks the model for one role at a time (thread-safe: parallel candidates share it)."""

    def __init__(self, config: LLMConfig, transport: Transport,
                 recorder: Recorder | None = None) -> None:
        self.config = config
        self.transport = transport
        self.recorder = recorder
        self.usage = Usage()
        self.by_role: dict[str, Usage] = {}
        self._lock = threading.Lock()
        self._local = threading.local()  # the role and target of this thread's request
        # A transport that reports each attempt (SDKTransport: the 529 before the success too)
        # is recorded attempt by attempt; any other is recorded per reply in `ask`.
        self._per_attempt = hasattr(transport, "on_attempt")
        if self._per_attempt and recorder is not None:
            transport.on_attempt = self._on_attempt  # type: ignore[attr-defined]

    def _on_attempt(self, request: dict[str, Any], response: dict[str, Any] | None,
                    error: str | None) -> None:
        assert self.recorder is not None
        self.recorder.append(role=getattr(self._local, "role", "?"),
                             target=getattr(self._local, "target", "?"), request=request,
                             response=response, error=error)

    def request(self, role: str, hw: Any, messages: list[dict[str, Any]], system: str,
                tool: str) -> dict[str, Any]:
        """The Messages API request: the cached system prefix, every tool, the role's forced."""
        return {
            "model": self.config.model,
            "max_tokens": self.config.max_tokens,
            # Tools come before the system text in the cache's order; declaring all of them in
            # a fixed order keeps the cached prefix the same for every role of a target.
            "tools": [TOOLS[name] for name in TOOL_ORDER],
            "tool_choice": {"type": "tool", "name": tool},
            "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
            "messages": messages,
            "metadata": {"user_id": f"kernel-porter:{role}:{hw.name}"},
        }

    def ask(self, role: str, hw: Any, **context: Any) -> Reply:
        """Ask `role`'s question for target `hw`; the checked reply.

        Raises:
            BudgetExhausted: the token budget is spent before or during the exchange.
            ReplyError: every attempt broke the output contract (the last problem named).
            TransportError / ReplayError: the API could not answer / the replay has no reply.
        """
        prompt = render(role, hw, **context)
        self._local.role, self._local.target = role, hw.name
        language = language_of(hw)
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt.user}]
        problem = ""
        for attempt in range(1, self.config.max_attempts + 1):
            self._check_budget()
            req = self.request(role, hw, messages, prompt.system, prompt.tool)
            response = self.transport.send(req)
            if self.recorder is not None and not self._per_attempt:
                self.recorder.append(role=role, target=hw.name, request=req, response=response)
            self._count(role, response.get("usage") or {})
            block = next((b for b in response.get("content", []) if b.get("type") == "tool_use"),
                         None)
            try:
                if block is None:
                    raise ReplyError(f"the reply has no tool_use block; call {prompt.tool}")
                if block.get("name") != prompt.tool:
                    raise ReplyError(f"called {block.get('name')!r}; call {prompt.tool}")
                data = validate(prompt.tool, block.get("input"), language=language)
            except ReplyError as exc:
                problem = str(exc)
                with self._lock:
                    self.usage.malformed += 1
                log.info("%s/%s: malformed reply (%s); asking again", role, hw.name, problem)
                messages = messages + [
                    {"role": "assistant", "content": response.get("content", [])},
                    {"role": "user", "content": _retry_content(block, problem)},
                ]
                continue
            return Reply(role=role, tool=prompt.tool, data=data, attempts=attempt,
                         prompt_chars=len(prompt.system) + len(prompt.user))
        raise ReplyError(f"{role} for {hw.name}: {self.config.max_attempts} replies broke the "
                         f"output contract; the last: {problem}")

    def _check_budget(self) -> None:
        if self.usage.total_tokens >= self.config.token_budget:
            raise BudgetExhausted(f"token budget spent ({self.usage.total_tokens} of "
                                  f"{self.config.token_budget})")

    def _count(self, role: str, usage: dict[str, Any]) -> None:
        with self._lock:
            self.usage.add_reply(usage)
            self.by_role.setdefault(role, Usage()).add_reply(usage)


def _retry_content(block: dict[str, Any] | None, problem: str) -> Any:
    """The user turn after a malformed reply: a tool_result error when it called a tool."""
    text = f"That reply cannot be used: {problem}. Call the tool again with a corrected input."
    if block is not None and block.get("id"):
        return [{"type": "tool_result", "tool_use_id": block["id"], "is_error": True,
                 "content": text}]
    return text
