"""Run a candidate's check in a child process, so a crash or a hang ends only the child.

A candidate is untrusted code: a kernel launcher can segfault (a bad pointer handed to a C
extension), loop forever, or hang in a GPU kernel that the host cannot stop. In the process that
runs the judge, any of these ends or blocks the whole command with no verdict. In a child
process the parent survives and can say what happened: which signal ended the child, or that it
passed its time limit, and where the check was at that moment. Killing the child also releases a
GPU held by a hung kernel (the driver tears down a dead process's context), which a thread in the
same process cannot do.

Protocol, parent side `run_child`: the job goes to the child's stdin (the caller's own format,
e.g. JSON); the child writes its human-readable output on stdout, which is relayed line by line
as it comes; lines that start with EVENT_PREFIX carry one JSON object each (an event, written by
`emit` in the child: the phase it is in, the trial it started, its plan) and are handed to
`on_event` instead of being shown. stderr goes to a temporary file and comes back whole in the
result. The child runs in its own session, so on a timeout (or Ctrl-C in the parent) the parent
kills its whole process group, grandchildren included.

Where the child was: a child that calls `enable_tracebacks` has Python's faulthandler write its
stack to stderr when a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGABRT) ends it, and when the
parent sends DUMP_SIGNAL just before killing it at the limit; `innermost_frame` reads the
innermost frame back ("kernel.py:12 in launch").
"""

from __future__ import annotations

import faulthandler
import json
import os
import re
import select
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

# Marks an event line on the child's stdout. Starts with an ASCII record separator, which a
# kernel's own prints do not begin with.
EVENT_PREFIX = "\x1eporter-event "
# Once the child closed its stdout, how long it may take to exit before it is killed.
_EXIT_GRACE_S = 10.0
# Sent to a child that passed its limit, so that its faulthandler writes where it is stuck;
# it is killed DUMP_WAIT_S later whether it wrote or not.
DUMP_SIGNAL = signal.SIGUSR1
DUMP_WAIT_S = 1.0
# One frame of a faulthandler dump: '  File "/path/kernel.py", line 12 in launch'.
# A thread's header in a faulthandler dump: "Current thread 0x7f.. (most recent call first):",
# "Thread 0x7f.. (most recent call first):", or "Stack (most recent call first):" (one thread).
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+.*:$"
                     r"|^Stack \(most recent call first\):$", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)',
                    re.MULTILINE)


@dataclass(frozen=True)
class ChildResult:
    """How a child ended.

    returncode: its exit status; negative: the number of the signal that ended it (as
        `subprocess` reports it); None: killed by the parent at the time limit.
    timed_out: True when the parent killed it at `limit_s`.
    limit_s: the time limit in force when it ended, in seconds from its start.
    seconds: how long it ran.
    stderr: everything it wrote on stderr.
    events: the events it emitted, in order.
    """

    returncode: int | None
    timed_out: bool
    limit_s: float
    seconds: float
    stderr: str
    events: tuple[dict[str, Any], ...] = field(default=())

    @property
    def signal_name(self) -> str | None:
        """"SIGSEGV" when a signal ended the child; None otherwise."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def last(self, key: str) -> Any:
        """The value of `key` in the latest event that has it; None when none has."""
        return next((e[key] for e in reversed(self.events) if key in e), None)

    def describe(self) -> str:
        """A few words: "crashed: SIGSEGV", "timed out after 30 s", "exited with status 3"."""
        if self.timed_out:
            return f"timed out after {self.limit_s:g} s"
        name = self.signal_name
        if name is not None:
            return f"crashed: {name}" + (" (killed from outside, e.g. out of memory)"
                                         if name == "SIGKILL" else "")
        return f"exited with status {self.returncode}"


def enable_tracebacks() -> None:
    """Child side: dump the Python stack to stderr on a fatal signal or on DUMP_SIGNAL."""
    # Every thread: the signal may be taken by a thread other than the one that is stuck.
    faulthandler.enable(file=sys.stderr, all_threads=True)
    faulthandler.register(DUMP_SIGNAL, file=sys.stderr, all_threads=True)


def innermost_frame(stderr: str) -> str | None:
    """Where the faulthandler dump in `stderr` says the child was: "kernel.py:12 in launch".

    The thread: the one the dump marks current (it crashed, or took the signal) when it has
    Python frames, else the last one listed, which is the main thread. A signal sent to the
    process can land on a thread without Python frames, such as a CUDA driver thread while the
    main thread waits for a hung kernel. The frame: faulthandler lists the most recent call
    first; the first one in the user's own code is given, skipping the standard library,
    installed packages and the harness (a launcher that crashed inside `ctypes.string_at`, or
    hung in a torch call the torch-compute guard intercepted, is reported at its own line),
    unless the thread has no other. None when stderr holds no dump.
    """
    headers = list(_THREAD.finditer(stderr))
    blocks = []
    for i, header in enumerate(headers):
        stop = headers[i + 1].start() if i + 1 < len(headers) else len(stderr)
        frames = list(_FRAME.finditer(stderr, header.end(), stop))
        if frames:
            blocks.append((header.group(0).startswith("Current"), frames))
    if not blocks:
        return None
    frames = next((f for current, f in blocks if current), blocks[-1][1])
    own = [f for f in frames if not _not_the_candidates(f["file"])]
    frame = (own or frames)[0]
    return f"{os.path.basename(frame['file'])}:{frame['line']} in {frame['func']}"


def _not_the_candidates(path: str) -> bool:
    """True for a file of the standard library, of an installed package, or of the judge itself
    (its guards wrap the torch calls a candidate makes, so they sit inside the candidate's frame).
    """
    parts = Path(path).parts
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    return any(Path(path).is_relative_to(root) for root in
               (Path(sysconfig.get_paths()["stdlib"]), Path(__file__).resolve().parent))


def emit(event: Mapping[str, Any]) -> None:
    """Child side: write one event line on stdout, flushed now (the child may die next)."""
    out = sys.__stdout__ if sys.__stdout__ is not None else sys.stdout
    out.write(EVENT_PREFIX + json.dumps(dict(event)) + "\n")
    out.flush()


def run_child(
    argv: Sequence[str],
    *,
    job: str,
    limit_s: float,
    env: Mapping[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
    on_event: Callable[[dict[str, Any]], float | None] | None = None,
) -> ChildResult:
    """Run `argv` as a child process, feed it `job`, relay its output, and bound its time.

    Args:
        argv: the command, e.g. [sys.executable, "-c", "from pkg import main; main()"].
        job: text written to the child's stdin, which is then closed.
        limit_s: seconds from the start after which the child is killed (its whole process
            group), e.g. 120.0.
        env: the child's environment; None: this process's.
        on_line: called with each stdout line that is not an event (without its newline).
        on_event: called with each event; a number it returns becomes the new limit (seconds
            from the start), e.g. once the child has said how much work it has.

    Returns:
        A `ChildResult`; it never raises for the child's own failures (a crash, a hang, an
        exit status): those are in the result.

    Raises:
        OSError: the child could not be started.
    """
    t0 = time.monotonic()
    events: list[dict[str, Any]] = []
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=err, env=None if env is None else dict(env),
                                start_new_session=True)
        try:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(job.encode())
                proc.stdin.close()
            except BrokenPipeError:  # it died before reading its job: its status says why
                pass

            def handle(raw: bytes) -> None:
                nonlocal limit_s
                line = raw.decode(errors="replace").rstrip("\r\n")
                if line.startswith(EVENT_PREFIX):
                    try:
                        event = json.loads(line[len(EVENT_PREFIX):])
                    except json.JSONDecodeError:
                        event = None
                    if isinstance(event, dict):
                        events.append(event)
                        new_limit = on_event(event) if on_event is not None else None
                        if new_limit is not None:
                            limit_s = float(new_limit)
                        return
                if on_line is not None:
                    on_line(line)

            timed_out = not _relay(proc.stdout.fileno(), t0, lambda: limit_s, handle)
            if not timed_out:
                try:
                    proc.wait(timeout=max(0.0, min(_EXIT_GRACE_S, t0 + limit_s - time.monotonic())))
                except subprocess.TimeoutExpired:
                    timed_out = True
            if timed_out:
                _ask_for_stack(proc)
                _kill_group(proc)
        finally:
            if proc.poll() is None:  # Ctrl-C or an error in a callback: never leave it running
                _kill_group(proc)
            if proc.stdout is not None:
                proc.stdout.close()
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return ChildResult(returncode=None if timed_out else proc.returncode, timed_out=timed_out,
                       limit_s=limit_s, seconds=time.monotonic() - t0, stderr=stderr,
                       events=tuple(events))


def _relay(fd: int, t0: float, limit: Callable[[], float], handle: Callable[[bytes], None]) -> bool:
    """Hand each line read from `fd` to `handle` until EOF (True) or the limit passes (False)."""
    buf = b""
    while True:
        remaining = t0 + limit() - time.monotonic()
        if remaining <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            continue  # the limit may have moved; the loop's head decides
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            if buf:
                handle(buf)
            return True
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            handle(line)


def _ask_for_stack(proc: subprocess.Popen[bytes]) -> None:
    """Send DUMP_SIGNAL and give the child DUMP_WAIT_S to write its stack (see module doc)."""
    try:
        proc.send_signal(DUMP_SIGNAL)
        proc.wait(timeout=DUMP_WAIT_S)  # a child without the handler dies of it: fine too
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child's process group (it leads its own session), then reap the child."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
