"""Cross-compile in a clean child process when this process has Triton's interpreter active.

Why: Triton picks interpreted-vs-compiled when a `@triton.jit` decorator runs, and that includes
the decorators inside `triton.language` itself (tl.sigmoid, tl.sum, ... are @jit functions). In
a process that imported triton with TRITON_INTERPRET=1 (the test session on a machine without a
GPU), those helpers are InterpretedFunctions; compiling a kernel that calls one makes the
interpreter patch `triton.language` in place and never undo it, so later compiles fail with
"'value' object has no attribute 'data'" / "'dtype'" depending on which kernels ran before and
on Triton's on-disk cache. Setting the variable back to "0" does not undo any of that, so the
only state-independent answer is a process where the interpreter never ran.

Protocol: the parent keeps one child (`python -m targets.isolated`, TRITON_INTERPRET=0) and
writes one JSON request line per compile on its stdin (the kernel's file, function name,
signature, constexprs, GPU target and options); the child imports the file with the
interpreter off (`targets.load_kernel`), runs `triton.compile` and writes one JSON line back:
the compiled kernel's metadata and its assembly (text as is, binaries base64), or the
compiler's error. The parent wraps that in `ChildCompiled`, which has the `metadata` /
`asm` shape the backends' read-out code expects, so resources are read by the same code either
way. Answers are cached in memory by (file content, kernel source, request).
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import logging
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from targets.base import CompileError
from targets.base import KernelRef

log = logging.getLogger(__name__)

# Longest a child may take (import + compile + exit); big matmul tiles take tens of seconds.
CHILD_TIMEOUT_S = 600
# A folder holding another Triton (`pip install --target DIR triton==X`): every compile then
# runs in the clean child with that Triton first on its path, so that the compile check reads
# resources as the GPU machines' compiler gives them. This machine's Triton (3.9) and theirs
# (3.6) differ: the split kernels' moments combine took 243 registers under 3.6 and 78 under 3.9
# (bench/NOTES.md item 59), which a 3.9 check could not see. `make test` installs the devices'
# version (Makefile DEVICE_TRITON) for tests/targets/test_device_triton.py.
TRITON_PATH_ENV = "PORTER_TRITON_PATH"
_REPO_ROOT = Path(__file__).resolve().parents[1]
_CACHE: dict[str, dict[str, Any]] = {}
_CACHE_LOCK = threading.Lock()


class ChildCompileFailed(Exception):
    """Triton rejected the kernel in the child; `kind` is the exception's type name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class ChildCompiled:
    """What the child compiled, shaped like a `triton.compiler.CompiledKernel` for read-out.

    metadata: attribute access to the JSON-able metadata fields (name, num_warps, shared, ...).
    asm: stage name -> text ("ptx", "amdgcn", ...) or bytes ("cubin", "hsaco").
    triton_version: the child's Triton (another one where PORTER_TRITON_PATH is set).
    """

    metadata: SimpleNamespace
    asm: dict[str, str | bytes]
    triton_version: str = ""


def interpreter_active() -> bool:
    """True when compiling in this process could meet interpreted Triton code.

    Three signals, any of which is enough: TRITON_INTERPRET is set to a true value now; triton's
    own knob says interpret (triton >= 3.4 has `triton.knobs`); or `triton.runtime.interpreter`
    has been imported, which happens only when some `@triton.jit` decorator ran under the
    interpreter (in triton 3.6 and 3.9 alike: at `import triton` with TRITON_INTERPRET=1 that is
    already true of tl.sigmoid & co.). The last one stays true after the variable is reset to
    "0", which is the case that made in-process compiles depend on history.
    """
    if os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes"):
        return True
    if "triton.runtime.interpreter" in sys.modules:
        return True
    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    try:
        return bool(knobs is not None and knobs.runtime.interpret)
    except AttributeError:  # a triton without runtime.interpret knob: the env check covers it
        return False


def kernel_file(fn: Any) -> Path:
    """The .py file defining the @triton.jit function `fn` (JITFunction or InterpretedFunction).

    Raises:
        CompileError: when the function was not defined in a file (e.g. exec'd from a string).
    """
    raw = getattr(fn, "fn", fn)
    code = getattr(raw, "__code__", None)
    name = getattr(fn, "__name__", repr(fn))
    filename = code.co_filename if code is not None else None
    if not filename or not Path(filename).is_file():
        raise CompileError(
            f"kernel {name!r}: cannot cross-compile in a clean process because it was not "
            f"defined in a file (co_filename={filename!r}); load it with targets.load_kernel"
        )
    return Path(filename)


def _encode_constexpr(name: str, value: Any, where: str) -> Any:
    """JSON form of a constexpr value: numbers, bools, strings, None, or a tagged tl.dtype."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    dtype_name = getattr(value, "name", None)
    if type(value).__name__ == "dtype" and isinstance(dtype_name, str):
        return {"tl.dtype": dtype_name}
    raise CompileError(
        f"cannot build {where}: constexpr {name}={value!r} ({type(value).__name__}) cannot be "
        "sent to the clean compile process (numbers, bools, strings and tl dtypes can)"
    )


def _decode_constexpr(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"tl.dtype"}:
        import triton.language as tl

        return tl.dtype(value["tl.dtype"])
    return value


def _fn_src(fn: Any) -> str | None:
    """The source Triton captured at decoration (JITFunction.src); None when not captured."""
    src = getattr(fn, "src", None)
    return src if isinstance(src, str) else None


def build_request(
    kernel: KernelRef, target: Any, options: dict[str, Any], where: str
) -> dict[str, Any]:
    """The JSON request for `kernel`: file, function name, signature, constexprs, target, options.

    Raises:
        CompileError: when the kernel has no source file or a value cannot be sent as JSON.
    """
    path = kernel_file(kernel.fn)
    for key, value in options.items():
        if not (value is None or isinstance(value, (bool, int, float, str))):
            raise CompileError(f"cannot build {where}: option {key}={value!r} is not a plain value")
    return {
        "file": str(path.resolve()),
        "function": kernel.fn.__name__,
        "name": kernel.name,
        "signature": dict(kernel.signature),
        "constexprs": {k: _encode_constexpr(k, v, where) for k, v in kernel.constexprs.items()},
        "target": [target.backend, target.arch, target.warp_size],
        "options": dict(options),
        "expected_src": _fn_src(kernel.fn),
        "triton_path": triton_path(),  # part of the cache key: another compiler
    }


def _cache_key(request: dict[str, Any]) -> str:
    content = Path(request["file"]).read_bytes()
    digest = hashlib.sha256(content)
    digest.update(json.dumps(request, sort_keys=True).encode())
    return digest.hexdigest()


def compile_in_child(
    kernel: KernelRef, target: Any, options: dict[str, Any], where: str
) -> ChildCompiled:
    """Compile `kernel` for `target` in a fresh interpreter-free Python process (cached).

    Args:
        kernel: the kernel; `kernel.fn` must come from a file (co_filename) that defines it at
            module level, as `targets.load_kernel` and generated modules do.
        target: the `GPUTarget`, e.g. GPUTarget("cuda", 90, 32).
        options: `triton.compile` options (num_warps, num_stages and the backend's knobs).
        where: "KERNEL for DEVICE (BACKEND ARCH)", for messages.

    Returns:
        ChildCompiled with the metadata and assembly of the compiled kernel.

    Raises:
        ChildCompileFailed: Triton rejected the kernel (the caller words the CompileError).
        CompileError: the child could not load the kernel or died.
    """
    request = build_request(kernel, target, options, where)
    key = _cache_key(request)
    with _CACHE_LOCK:
        answer = _CACHE.get(key)
    if answer is None:
        answer = _run_child(request, where)
        if answer.get("status") in ("ok", "compile_error"):  # deterministic answers only
            with _CACHE_LOCK:
                _CACHE[key] = answer
    status = answer.get("status")
    if status == "compile_error":
        raise ChildCompileFailed(answer["kind"], answer["message"])
    if status != "ok":
        message = answer.get("message", "clean compile process failed")
        raise CompileError(f"cannot build {where}: {message}")
    asm: dict[str, str | bytes] = dict(answer["asm_text"])
    asm.update({k: base64.b64decode(v) for k, v in answer["asm_binary"].items()})
    return ChildCompiled(metadata=SimpleNamespace(**answer["metadata"]), asm=asm,
                         triton_version=answer.get("triton_version", ""))


def triton_path() -> str | None:
    """The folder PORTER_TRITON_PATH names (None: unset: the Triton this process imports).

    Raises:
        CompileError: it names no folder holding a `triton` package.
    """
    path = os.environ.get(TRITON_PATH_ENV)
    if not path:
        return None
    if not (Path(path) / "triton" / "__init__.py").is_file():
        raise CompileError(f"{TRITON_PATH_ENV}={path}: no triton package there (install one "
                           f"with `pip install --no-deps --target {path} triton==VERSION`)")
    return str(Path(path).resolve())


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    paths = (str(_REPO_ROOT), triton_path() or "", env.get("PYTHONPATH", ""))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return env


class _Worker:
    """One long-lived clean child serving requests in turn (JSON lines on stdin / stdout).

    Starting Python, torch and triton costs seconds while one compile often takes a fraction of
    one, so a process keeps its child. The child is restarted when it died, timed out, or when
    the variables it was started with (TRITON_*, PYTHONPATH) have changed since.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.env_key: tuple[tuple[str, str], ...] = ()
        self.stderr: Any = None
        self.lock = threading.Lock()

    def _start(self, env: dict[str, str], key: tuple[tuple[str, str], ...]) -> None:
        self.stop()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the child
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "targets.isolated"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        self.env_key = key

    def stop(self) -> None:
        """End the child (closing its stdin ends its loop; kill it if it does not go)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                if proc.stdin is not None:
                    proc.stdin.close()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None

    def _stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0)
        lines = self.stderr.read().decode(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:])[-600:]

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send `request`, wait up to `timeout` s for the answer; a crash answers status=crashed."""
        env = _child_env()
        key = tuple(
            sorted((k, v) for k, v in env.items() if k.startswith("TRITON_") or k == "PYTHONPATH")
        )
        with self.lock:
            if self.proc is None or self.proc.poll() is not None or key != self.env_key:
                self._start(env, key)
            assert self.proc is not None
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps(request).encode() + b"\n")
                self.proc.stdin.flush()
                line = self._read_line(self.proc.stdout.fileno(), timeout)
            except (OSError, TimeoutError) as exc:
                message = f"clean compile process failed ({exc}): {self._stderr_tail()}"
                self.stop()
                return {"status": "crashed", "message": message}
            return json.loads(line)

    @staticmethod
    def _read_line(fd: int, timeout: float) -> bytes:
        deadline = time.monotonic() + timeout
        buf = b""
        while not buf.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"no answer within {timeout:.0f} s")
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise OSError("it exited without an answer")
            buf += chunk
        return buf


_WORKER = _Worker()
atexit.register(_WORKER.stop)


def _run_child(request: dict[str, Any], where: str) -> dict[str, Any]:
    log.debug("compiling %s in a clean process (interpreter active here, or %s set)", where,
              TRITON_PATH_ENV)
    return _WORKER.ask(request, CHILD_TIMEOUT_S)


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _serve(request: dict[str, Any]) -> dict[str, Any]:
    """The child's work: load, compile, and describe the result as JSON-able data."""
    import triton
    from triton.backends.compiler import GPUTarget

    from targets.loading import KernelLoadError
    from targets.loading import load_kernel
    from targets.triton_source import build_source

    try:
        fn = load_kernel(request["file"], request["function"])
    except KernelLoadError as exc:
        return {
            "status": "load_error",
            "message": f"clean compile process could not load it: {exc}",
        }
    expected = request.get("expected_src")
    if expected is not None and _fn_src(fn) not in (None, expected):
        return {
            "status": "load_error",
            "message": f"{request['file']} changed since {request['function']} was loaded; "
            "reload the kernel before compiling",
        }
    kernel = KernelRef(
        name=request["name"],
        fn=fn,
        signature=request["signature"],
        constexprs={k: _decode_constexpr(v) for k, v in request["constexprs"].items()},
    )
    source = build_source(kernel)
    backend, arch, warp_size = request["target"]
    try:
        compiled = triton.compile(
            source, target=GPUTarget(backend, arch, warp_size), options=request["options"]
        )
    except Exception as exc:  # noqa: BLE001 -- Triton raises many types; all mean "the compiler said no"
        detail = str(exc).strip().splitlines()
        return {
            "status": "compile_error",
            "kind": type(exc).__name__,
            "message": detail[-1] if detail else "",
        }
    meta = compiled.metadata
    fields = meta._asdict() if hasattr(meta, "_asdict") else dict(vars(meta))
    text = {k: v for k, v in compiled.asm.items() if isinstance(v, str)}
    binary = {
        k: base64.b64encode(v).decode() for k, v in compiled.asm.items() if isinstance(v, bytes)
    }
    return {
        "status": "ok",
        "triton_version": triton.__version__,
        "metadata": {k: v for k, v in fields.items() if _plain(v)},
        "asm_text": text,
        "asm_binary": binary,
    }


def main() -> int:
    """Child entry point: JSON requests on stdin, one JSON answer line each on stdout."""
    # Kernel files and the compiler may print (Python or C level); keep fd 1 for the answers.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _serve(json.loads(line))
        except Exception as exc:  # noqa: BLE001 -- keep serving; the parent reports it as a failed compile
            answer = {
                "status": "crashed",
                "message": f"clean compile process: {type(exc).__name__}: {exc}",
            }
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
