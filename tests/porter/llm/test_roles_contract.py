"""The Claude roles implement porter.roles' interfaces (implementation "claude")."""

from __future__ import annotations

from porter.llm.client import LLMClient
from porter.llm.config import LLMConfig
from porter.llm.roles import ClaudeDebugger
from porter.llm.roles import ClaudePlanner
from porter.llm.roles import ClaudeProfiler
from porter.llm.roles import ClaudeSearch
from porter.llm.roles import ClaudeWriter
from porter.llm.roles import Session
from porter.roles import Debugger
from porter.roles import KernelWriter
from porter.roles import Planner
from porter.roles import Profiler
from porter.roles import Search


class _NoTransport:
    def send(self, request: dict) -> dict:
        raise AssertionError("not called")


def test_claude_roles_satisfy_the_role_protocols() -> None:
    session = Session(LLMClient(LLMConfig(), _NoTransport()), op={})
    pairs = [(ClaudePlanner, Planner, "planner"), (ClaudeWriter, KernelWriter, "writer"),
             (ClaudeDebugger, Debugger, "debugger"), (ClaudeSearch, Search, "search"),
             (ClaudeProfiler, Profiler, "profiler")]
    for cls, proto, name in pairs:
        role = cls(session)
        assert isinstance(role, proto), cls
        assert (role.name, role.implementation) == (name, "claude")
