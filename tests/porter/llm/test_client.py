"""The client against the stub server through the real SDK: retries, malformed replies, usage,
recording; and the replay transport."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

import hwmodels
from porter.llm.client import BudgetExhausted
from porter.llm.client import LLMClient
from porter.llm.inputs import op_context
from porter.llm.record import ReplayError
from porter.llm.record import ReplayTransport
from porter.llm.record import read_exchanges
from porter.llm.record import request_hash
from porter.llm.tools import ReplyError
from porter.specs import load_spec
from tests.porter.llm.helpers import PLAN
from tests.porter.llm.helpers import SPEC
from tests.porter.llm.helpers import Script
from tests.porter.llm.helpers import client
from tests.porter.llm.helpers import write
from tests.porter.llm.stub_server import Reply
from tests.porter.llm.stub_server import StubServer
from tests.porter.llm.stub_server import overloaded
from tests.porter.llm.stub_server import rate_limited
from tests.porter.llm.stub_server import tool_reply

NO_LAUNCH = tool_reply("write_kernel", language="triton", kernel_name="_k", notes="x",
                       source="import triton\n@triton.jit\ndef _k(x_ptr):\n    pass\n")


@pytest.fixture(scope="module")
def op() -> dict:
    return op_context(load_spec(SPEC))


def test_overloaded_and_rate_limited_are_retried_then_succeed(tmp_path: Path, op: dict) -> None:
    script = Script({"plan": [overloaded(), rate_limited(), PLAN]})
    with StubServer(script) as server:
        llm, _ = client(server.base_url, tmp_path)
        reply = llm.ask("planner", hwmodels.get("h100"), op=op)
    assert reply.data["bound"] == "memory" and reply.attempts == 1
    assert len(server.requests) == 3
    lines = read_exchanges(tmp_path / "llm")
    assert [e["error"] for e in lines] == ["HTTP 529: overloaded_error (scripted by the test)",
                                           "HTTP 429: rate_limit_error (scripted by the test)",
                                           None]
    assert lines[-1]["response"]["content"][0]["name"] == "plan"
    assert llm.usage.requests == 1 and llm.usage.cache_write_tokens > 0


def test_malformed_reply_is_asked_again_with_the_problem(tmp_path: Path, op: dict) -> None:
    script = Script({"write_kernel": [NO_LAUNCH, Reply(content=[{"type": "text", "text": "hi"}]),
                                      write("good")]})
    with StubServer(script) as server:
        llm, _ = client(server.base_url, tmp_path)
        reply = llm.ask("writer", hwmodels.get("mi300x"), op=op)
    assert reply.attempts == 3 and "def launch" in reply.data["source"]
    second = server.requests[1]["messages"]
    assert second[1]["role"] == "assistant" and second[2]["content"][0]["is_error"] is True
    assert "no top-level `def launch(*inputs, out=None, config=None)`" in \
        second[2]["content"][0]["content"]
    third = server.requests[2]["messages"]
    assert "no tool_use block" in third[-1]["content"]
    assert llm.usage.malformed == 2
    # the cached prefix (system + tools) is the same on every attempt: one write, then reads
    assert {json.dumps(r["system"]) for r in server.requests} == {
        json.dumps(server.requests[0]["system"])}
    assert server.requests[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert llm.usage.cache_read_tokens > 0


def test_malformed_every_time_is_reported_after_max_attempts(tmp_path: Path, op: dict) -> None:
    with StubServer(Script({"write_kernel": [NO_LAUNCH]})) as server:
        llm, _ = client(server.base_url, tmp_path, max_attempts=2)
        with pytest.raises(ReplyError, match="2 replies broke the output contract; the last: "
                                             "write_kernel.source: no top-level"):
            llm.ask("writer", hwmodels.get("h100"), op=op)


@pytest.mark.parametrize(("source", "problem"), [
    ("import os\ndef launch(x, out=None):\n    pass\n", "imports os"),
    ("import triton\ndef launch(x, out=None):\n    pass\n", "no @triton.jit kernel"),
    ("def launch(x):\n  return (\n", "not valid Python"),
], ids=["forbidden-import", "no-kernel", "syntax"])
def test_output_contract_is_enforced(source: str, problem: str) -> None:
    from porter.llm.tools import validate

    with pytest.raises(ReplyError, match=problem):
        validate("write_kernel", {"language": "triton", "source": source, "kernel_name": "k",
                                  "notes": ""})
    with pytest.raises(ReplyError, match="this target needs metal"):
        validate("write_kernel", {"language": "triton", "source": source, "kernel_name": "k",
                                  "notes": ""}, language="metal")


def test_token_budget_stops_before_the_next_request(tmp_path: Path, op: dict) -> None:
    with StubServer(Script({"plan": [PLAN]})) as server:
        llm, _ = client(server.base_url, tmp_path, token_budget=10)
        llm.ask("planner", hwmodels.get("h100"), op=op)
        with pytest.raises(BudgetExhausted, match="token budget spent"):
            llm.ask("planner", hwmodels.get("h100"), op=op)


def test_replay_serves_recorded_replies_with_networking_off(
        tmp_path: Path, op: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    with StubServer(Script({"plan": [overloaded(), PLAN]})) as server:
        llm, cfg = client(server.base_url, tmp_path)
        first = llm.ask("planner", hwmodels.get("b200"), op=op)

    def no_network(*args: object, **kwargs: object) -> None:
        raise OSError("networking is disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    replay = LLMClient(cfg, ReplayTransport(tmp_path))
    again = replay.ask("planner", hwmodels.get("b200"), op=op)
    assert again.data == first.data
    with pytest.raises(ReplayError, match=r"first difference at request\.messages\[0\]\.content "
                                          r"\(line \d+, char \d+\): recorded"):
        replay.ask("planner", hwmodels.get("b200"), op={**op, "name": "cumsum_other"})
    with pytest.raises(ReplayError, match=r"recorded '.*on b200 at.*' != now '.*on h100 at"):
        replay.ask("planner", hwmodels.get("h100"), op=op)


def test_judge_numbers_are_masked_when_matching_a_replay() -> None:
    a = {"messages": [{"content": "stage smoke <judge>err 1.5e-3 at (4, 14), seed 0x1f</judge>"}]}
    b = {"messages": [{"content": "stage smoke <judge>err 2.0e-3 at (1, 9), seed 0x2e</judge>"}]}
    c = {"messages": [{"content": "stage sweep <judge>err 1.5e-3 at (4, 14), seed 0x1f</judge>"}]}
    assert request_hash(a) == request_hash(b) != request_hash(c)
