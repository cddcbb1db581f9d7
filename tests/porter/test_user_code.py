"""The user's own code cannot take the port down (issue 48): a reference or launcher that
segfaults or hangs ends the port in bounded time with one line and exit 4, nothing written."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
SEGFAULT = "__import__('ctypes').string_at(0)"
HANG = "__import__('time').sleep(3600)"


def _spec(tmp: Path, *, reference: str = "", launcher: str = "") -> Path:
    """examples/rmsnorm with its own kernel.py; `reference`/`launcher`: a statement each runs
    first."""
    shutil.copy(ROOT / "examples" / "rmsnorm" / "kernel.py", tmp / "kernel.py")
    if launcher:
        k = (tmp / "kernel.py").read_text()
        head, rest = k.split('    """RMSNorm over the last dimension of `x`.', 1)
        doc_end = rest.index('"""') + 3
        k = head + '    """RMSNorm over the last dimension of `x`.' + rest[:doc_end] + \
            f"\n    {launcher}" + rest[doc_end:]
        (tmp / "kernel.py").write_text(k)
    text = (ROOT / "examples" / "rmsnorm" / "spec.py").read_text()
    if reference:
        text = text.replace("def reference(x: torch.Tensor, weight: torch.Tensor) -> "
                            "torch.Tensor:\n", "def reference(x: torch.Tensor, weight: "
                            f"torch.Tensor) -> torch.Tensor:\n    {reference}\n")
    text += "\nSHAPES = [(4096, 4096)]\nDTYPES = [torch.float32]\n"
    (tmp / "spec.py").write_text(text)
    return tmp / "spec.py"


@pytest.mark.parametrize(("where", "what"), [("reference", SEGFAULT), ("reference", HANG),
                                             ("launcher", SEGFAULT), ("launcher", HANG)])
def test_a_crashing_or_hanging_user_code_ends_the_port_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, what: str) -> None:
    from porter.commands.port import port_cmd

    monkeypatch.setenv("PORTER_USER_CODE_TIMEOUT_S", "20")
    spec = _spec(tmp_path, **{where: what})
    run = tmp_path / "runs" / "r"
    t0 = time.monotonic()
    res = CliRunner().invoke(port_cmd, [str(spec), "--targets", "h100", "--run-dir", str(run),
                                        "--out", str(tmp_path / "packs")])
    assert time.monotonic() - t0 < 60
    assert res.exit_code == 4, res.output
    line = res.output.strip().splitlines()[-1]
    assert "spec.py: the spec's own code" in line
    assert ("SIGSEGV" in line) if what == SEGFAULT else ("timed out after 20 s" in line)
    assert ("kernel.py" if where == "launcher" else "spec.py:") in line.split(" at ")[-1]
    assert not (run / "ledger.jsonl").exists() and not (tmp_path / "packs").exists()
