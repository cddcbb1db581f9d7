"""The LLM tests port to named targets; on a GPU machine whose device is one of them the agent
would judge natively. Tests pin the CPU path unless marked `gpu`."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _cpu_path_unless_gpu(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.node.get_closest_marker("gpu") is None:
        import porter.llm.agent as agent_mod

        monkeypatch.setattr(agent_mod, "local_device", lambda: None)
