"""The user's own code, run first in a child process with a time limit (issue 48).

`porter port` imports the spec, runs its `make_inputs` and reference, and records the user's
launcher, in its own process. A reference or launcher that segfaults (a C extension handed a bad
pointer) or loops forever then ended the port with exit 139 and no message, or hung it with no
bound. `porter check` already isolates candidates (harness.isolation); `preflight` does the same
for the user's code before the port touches it: a child loads the spec (the module, make_inputs
and the reference at the smoke shape) and records the user's launcher at the spec's shapes for
each target, exactly as the port will. A crash or a hang there raises `UserCodeError` (the CLI
exits 4) naming the signal or the limit, what was running, and the innermost frame of the user's
code; nothing has been written yet, so there is nothing a resume could trust. Any other failure
is left to the port itself, which reports it as it always has (a bad spec is one line, exit 2).

A spec whose bytes passed in this process is not checked again (ports of one spec in a test run,
or a resumed run). PORTER_USER_CODE_TIMEOUT_S sets the limit (default 120 s).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from porter.errors import PortError
from porter.errors import UserCodeError

TIMEOUT_ENV = "PORTER_USER_CODE_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 120.0
_REPO_ROOT = Path(__file__).resolve().parents[1]
_passed: set[tuple[str, tuple[str, ...]]] = set()  # (spec sha256, targets) that passed here


def timeout_s() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if text is None:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise PortError(f"{TIMEOUT_ENV}={text!r}: expected a positive number of seconds")
    return value


def preflight(spec_path: Path, targets: list[str]) -> None:
    """Run the spec's code as the port will, in a child; raise `UserCodeError` if it crashed
    the child or passed the time limit. Returns quietly otherwise (also when the child failed
    in an ordinary way: the port then says why itself)."""
    from harness.isolation import innermost_frame
    from harness.isolation import run_child

    try:
        digest = hashlib.sha256(Path(spec_path).read_bytes()).hexdigest()
    except OSError:
        return  # a missing file: load_spec says so
    key = (digest, tuple(targets))
    if key in _passed:
        return
    limit = timeout_s()
    path = os.pathsep.join(filter(None, [str(_REPO_ROOT), os.environ.get("PYTHONPATH")]))
    result = run_child(
        [sys.executable, "-c", "from porter.user_code import child_main; child_main()"],
        job=json.dumps({"spec": str(spec_path), "targets": list(targets)}), limit_s=limit,
        env={**os.environ, "PYTHONPATH": path}, on_line=lambda line: None)
    if not (result.timed_out or result.signal_name):
        _passed.add(key)
        return
    phase = result.last("phase") or "starting"
    frame = innermost_frame(result.stderr)
    at = f", at {frame}" if frame else ""
    how = f" ({TIMEOUT_ENV} sets the limit)" if result.timed_out else ""
    raise UserCodeError(f"{spec_path}: the spec's own code {result.describe()} while {phase}"
                        f"{at}{how}; nothing was ported or written")


def child_main() -> None:
    """Child side: the job (JSON) on stdin; events on stdout; exit 0, or 1 on an ordinary
    failure (the port reports it in its own process)."""
    from harness.isolation import emit
    from harness.isolation import enable_tracebacks

    enable_tracebacks()
    job = json.loads(sys.stdin.read())
    try:
        import hwmodels
        from porter.specs import load_spec

        emit({"phase": "loading the spec (its module, then make_inputs and the reference at "
                       "the smoke shape)"})
        spec = load_spec(job["spec"])
        if spec.triton_launcher is None:
            sys.exit(0)
        from porter.recorder import RecordError
        from porter.user_kernel import record_at

        problem = spec.problem()
        for target in job["targets"]:
            hw = hwmodels.get(target)
            for shape in (tuple(spec.smoke_shape), *map(tuple, spec.shapes)):
                emit({"phase": f"recording the launcher at {'x'.join(map(str, shape))} for "
                               f"{hw.name}"})
                try:
                    record_at(spec, problem, hw, shape, spec.dtypes[0])
                except RecordError:
                    pass  # the port says why a launch cannot be recorded
    except SystemExit:
        raise
    except BaseException:  # noqa: BLE001 - ordinary failures are the port's to report
        sys.exit(1)
    sys.exit(0)
