"""The harness's self-test: purpose-built bad kernels the judge must reject, each for the right
reason, and one correct kernel that must pass all five stages.

`harness.selftest.run(device) -> list[SelftestRow]`; `porter selftest` prints the table.
"""

from __future__ import annotations

from harness.selftest.runner import CASES
from harness.selftest.runner import PASS
from harness.selftest.runner import SelftestRow
from harness.selftest.runner import load_kernels
from harness.selftest.runner import resolve_device
from harness.selftest.runner import run

__all__ = ["CASES", "PASS", "SelftestRow", "load_kernels", "resolve_device", "run"]
