"""A local server that speaks enough of the Messages API for the real SDK (POST /v1/messages).

Replies are scripted: `StubServer(script)` where `script(request) -> Reply`. A `Reply` is a
tool_use answer, an HTTP error (429 rate limit, 529 overloaded, ...), or raw content blocks (a
malformed answer). Usage is counted roughly (4 characters a token) and prompt caching is
simulated: the first request with a given cached system prefix writes it, later ones read it.

Every request is kept in `server.requests` (the parsed JSON) for the tests to inspect.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    tool: str | None = None  # the tool_use name
    input: dict[str, Any] | None = None  # its input
    status: int = 200
    error_type: str = ""  # "rate_limit_error" | "overloaded_error" with status 429 / 529
    content: list[dict[str, Any]] | None = None  # raw content blocks (overrides tool/input)
    headers: dict[str, str] = field(default_factory=dict)


def tool_reply(tool: str, **data: Any) -> Reply:
    return Reply(tool=tool, input=data)


def overloaded() -> Reply:
    return Reply(status=529, error_type="overloaded_error")


def rate_limited() -> Reply:
    return Reply(status=429, error_type="rate_limit_error", headers={"retry-after": "0"})


class StubServer:
    """`with StubServer(script) as server:` then `server.base_url` for the SDK."""

    def __init__(self, script: Callable[[dict[str, Any]], Reply]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._cached: set[str] = set()
        self._lock = threading.Lock()
        self._n = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                if not self.path.rstrip("/").endswith("/v1/messages"):
                    self._send(404, {"type": "error", "error": {"type": "not_found_error",
                                                                "message": self.path}})
                    return
                request = json.loads(body)
                with stub._lock:
                    stub.requests.append(request)
                reply = stub.script(request)
                if reply.status != 200:
                    self._send(reply.status, {"type": "error", "error": {
                        "type": reply.error_type, "message": "scripted by the test"}},
                        reply.headers)
                    return
                self._send(200, stub._message(request, reply))

            def _send(self, status: int, obj: dict[str, Any],
                      headers: dict[str, str] | None = None) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> StubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _message(self, request: dict[str, Any], reply: Reply) -> dict[str, Any]:
        with self._lock:
            self._n += 1
            n = self._n
        if reply.content is not None:
            content = reply.content
        else:
            content = [{"type": "tool_use", "id": f"toolu_stub{n:04d}", "name": reply.tool,
                        "input": reply.input}]
        cached, fresh = 0, 0
        for block in request.get("system", []):
            size = len(block.get("text", "")) // 4
            if block.get("cache_control"):
                key = hashlib.sha256(block["text"].encode()).hexdigest()
                with self._lock:
                    seen = key in self._cached
                    self._cached.add(key)
                cached += size if seen else 0
                fresh += 0 if seen else size
            else:
                fresh += 0
        user = len(json.dumps(request.get("messages", []))) // 4
        out = len(json.dumps(content)) // 4
        return {
            "id": f"msg_stub{n:04d}", "type": "message", "role": "assistant",
            "model": request.get("model", "stub"), "content": content,
            "stop_reason": "tool_use" if reply.content is None else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": user, "output_tokens": out,
                      "cache_creation_input_tokens": fresh, "cache_read_input_tokens": cached},
        }
