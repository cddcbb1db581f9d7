"""One catalog of the errors a user can meet. Each says what failed and how to fix it.

The CLI turns any `PorterError` into a one-paragraph message and a non-zero exit code,
never a traceback.

Errors of other packages a user can cause derive from `PorterError` too, where they are raised:
`hwmodels.HardwareModelError` (a broken device YAML, naming file and field),
`hwmodels.UnknownDeviceError` (listing the known devices) and `hwmodels.BrokenDeviceError` (a
device whose YAML did not load; both of the others).
"""

from __future__ import annotations

from hwmodels.errors import PorterError  # noqa: F401 - the root, owned by the lowest package


class SpecError(PorterError):
    """An op spec or KernelBench file cannot be used; the message names the file and the problem.

    Args:
        path: the spec file (or "<name>" for a spec built in code).
        problem: what is wrong, e.g. "no reference: define `reference(*inputs)`".
        hint: optional how-to-fix sentence appended to the message.
    """

    def __init__(self, path: object, problem: str, hint: str = "") -> None:
        self.path = str(path)
        self.problem = problem
        self.hint = hint
        message = f"{self.path}: {problem}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)


class KernelUnavailableError(PorterError):
    """A kernel the user asked for cannot be produced or loaded (no codegen, no TRITON_KERNEL)."""


class FleetError(PorterError):
    """A fleet file (`porter compare --fleet`) cannot be used; the message names the file and
    the field, e.g. "fleets/ours.yaml: devices[1].count: must be a positive integer, got 'x'"."""


class PortError(PorterError):
    """The port cannot start: unknown target, or a spec/op the porter cannot handle."""


class UserCodeError(PorterError):
    """The user's own code (a spec's module, make_inputs, reference or launcher) crashed the
    process or hung, as found in a child process before the port ran it in its own; the message
    names the signal or the time limit, what was running, and the file and line. The CLI exits
    with EXIT_CODE."""

    EXIT_CODE = 4
