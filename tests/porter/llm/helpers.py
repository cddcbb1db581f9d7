"""Shared by the LLM tests: the fixtures' kernels, scripted replies, a client on the stub server."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from porter.llm.client import LLMClient
from porter.llm.config import LLMConfig
from porter.llm.record import Recorder
from porter.llm.transport import SDKTransport
from tests.porter.llm.stub_server import Reply
from tests.porter.llm.stub_server import tool_reply

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SPEC = FIXTURES / "cumsum_spec.py"
ROOT = Path(__file__).resolve().parents[3]


def kernel(name: str) -> str:
    """A fixture module's source: good, nocompile, wrong, torch, crash; or "metal"."""
    if name == "metal":
        return (FIXTURES / "cumsum.metal").read_text()
    return (FIXTURES / f"cumsum_{name}.py").read_text()


def write(name: str, notes: str = "") -> Reply:
    lang = "metal" if name == "metal" else "triton"
    kname = "cuda_cumsum_kernel" if lang == "metal" else "_cumsum_fwd_kernel"
    return tool_reply("write_kernel", language=lang, source=kernel(name), kernel_name=kname,
                      notes=notes or f"the {name} fixture")


def diagnose(cause: str, fixed: str, explanation: str) -> Reply:
    return tool_reply("diagnose", cause=cause, explanation=explanation, fixed={
        "language": "triton", "source": kernel(fixed), "kernel_name": "_cumsum_fwd_kernel",
        "notes": "fixed"})


PLAN = tool_reply("plan", bound="memory", strategy="one program per row; the row scanned in "
                  "chunks with a running carry", try_first=["BLOCK_N=1024, num_warps=4"])


def prompt_of(request: dict[str, Any]) -> str:
    """The user text of a request's first message."""
    content = request["messages"][0]["content"]
    return content if isinstance(content, str) else content[0]["text"]


def tool_of(request: dict[str, Any]) -> str:
    return request["tool_choice"]["name"]


def target_of(request: dict[str, Any]) -> str:
    return request["metadata"]["user_id"].rsplit(":", 1)[1]


class Script:
    """Replies by tool (and target): queues of replies; the last one of a queue repeats."""

    def __init__(self, replies: dict[str, list[Reply]],
                 route: Callable[[dict[str, Any]], str] | None = None) -> None:
        self.replies = {k: list(v) for k, v in replies.items()}
        self.route = route or tool_of

    def __call__(self, request: dict[str, Any]) -> Reply:
        queue = self.replies[self.route(request)]
        return queue.pop(0) if len(queue) > 1 else queue[0]


def client(base_url: str, run_dir: Path, **config: Any) -> tuple[LLMClient, LLMConfig]:
    cfg = LLMConfig(api_key="test-key", base_url=base_url, retry_base_s=0.0,
                    **{"parallel": 1, **config})
    return LLMClient(cfg, SDKTransport(cfg), Recorder(run_dir / "llm")), cfg
