"""harness.isolation: a child that crashes or hangs ends only itself, and the parent says how.

The children are a few lines of plain Python (no torch), so each test takes well under a second
except the hang, which waits for its (short) limit.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

import harness.isolation
from harness.isolation import EVENT_PREFIX
from harness.isolation import innermost_frame
from harness.isolation import run_child

# Child preamble: the faulthandler hooks the check's child installs, and its event writer.
_PRE = ("import os, signal, sys, time\n"
        "from harness.isolation import emit, enable_tracebacks\n"
        "enable_tracebacks()\n")


def _child(body: str) -> list[str]:
    return [sys.executable, "-c", _PRE + body]


def test_output_is_relayed_events_are_not_and_the_status_comes_back() -> None:
    lines: list[str] = []
    events: list[dict] = []
    result = run_child(_child("job = sys.stdin.read()\n"
                              "print('got', job, flush=True)\n"
                              "emit({'stage': 'smoke'})\n"
                              "print('partial line without newline', end='')\n"
                              "sys.stderr.write('a warning\\n')\n"
                              "sys.exit(1)\n"),
                       job="JOB", limit_s=30, on_line=lines.append,
                       on_event=lambda e: events.append(e) or None)
    assert lines == ["got JOB", "partial line without newline"]
    assert events == [{"stage": "smoke"}] and result.events == ({"stage": "smoke"},)
    assert result.returncode == 1 and not result.timed_out and result.signal_name is None
    assert result.stderr == "a warning\n" and result.describe() == "exited with status 1"


def test_a_segfault_is_named_with_the_innermost_frame() -> None:
    result = run_child(_child("def launch():\n"
                              "    emit({'stage': 'sweep', 'shape': [4, 64]})\n"
                              "    os.kill(os.getpid(), signal.SIGSEGV)\n"
                              "launch()\n"),
                       job="", limit_s=30)
    assert result.signal_name == "SIGSEGV" and result.describe() == "crashed: SIGSEGV"
    assert result.last("stage") == "sweep" and result.last("shape") == [4, 64]
    assert innermost_frame(result.stderr) == "<string>:6 in launch"


def test_a_hang_is_killed_at_the_limit_with_where_it_was() -> None:
    result = run_child(_child("emit({'stage': 'smoke'})\n"
                              "def spin():\n"
                              "    while True:\n"
                              "        time.sleep(0.01)\n"
                              "spin()\n"),
                       job="", limit_s=1.5)
    assert result.timed_out and result.returncode is None
    assert result.describe() == "timed out after 1.5 s"
    assert 1.5 <= result.seconds < 10
    assert innermost_frame(result.stderr) == "<string>:7 in spin"


def test_an_event_can_move_the_limit() -> None:
    # The limit starts at 2 s; the child's plan raises it to 30 s, so its 2.5 s of work finishes.
    result = run_child(_child("emit({'trials': 3})\ntime.sleep(2.5)\nprint('done')\n"),
                       job="", limit_s=2.0, on_event=lambda e: 30.0 if "trials" in e else None)
    assert not result.timed_out and result.returncode == 0 and result.limit_s == 30.0


def test_the_frame_is_the_candidates_own_in_the_stuck_thread() -> None:
    # As seen on an H100 with a GPU kernel that never ends: the main thread waits in a torch
    # call that the harness's torch-compute guard intercepted. The frames of the library and of
    # the harness are skipped: the frame named is the launcher's line.
    stdlib = sysconfig.get_paths()["stdlib"]
    guards = Path(harness.isolation.__file__).with_name("guards.py")
    main = ("Thread 0x00007f0000000001 (most recent call first):\n"
            '  File "/opt/venv/lib/python3.12/site-packages/torch/_ops.py", line 865 in __call__\n'
            f'  File "{guards}", line 107 in __torch_dispatch__\n'
            '  File "/tmp/spec/kernel.py", line 27 in spin_gpu\n'
            '  File "/repo/porter/commands/_common.py", line 79 in candidate\n')
    helper = ("Thread 0x00007f0000000002 (most recent call first):\n"
              f'  File "{stdlib}/threading.py", line 331 in wait\n'
              '  File "/tmp/spec/kernel.py", line 40 in watchdog\n')
    # The signal landed on a thread without Python frames (a CUDA driver thread): nothing is
    # marked current, and the main thread, listed last, is the one that is stuck.
    assert innermost_frame(helper + "\n" + main) == "kernel.py:27 in spin_gpu"
    # The helper thread crashed: the dump marks it current.
    crashed = "Current " + helper.replace("Thread", "thread", 1)
    assert innermost_frame(crashed + "\n" + main) == "kernel.py:40 in watchdog"


def test_event_prefix_is_not_plain_text() -> None:
    # A kernel's own prints cannot be mistaken for events: the prefix starts with a control byte.
    assert EVENT_PREFIX[0] == "\x1e"
    assert innermost_frame("no dump here") is None
