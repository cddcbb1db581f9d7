"""What software and device a result came from: versions and the git revision.

Every lookup degrades to None rather than raising: a missing driver library (pynvml without an
NVIDIA driver) or a checkout without git must never stop a run from recording its results.
"""

from __future__ import annotations

import functools
import logging
import platform
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)


def _driver_version() -> str | None:
    """NVIDIA driver version via pynvml (imported lazily), or None with the reason logged."""
    try:
        import pynvml  # from nvidia-ml-py; needs libnvidia-ml, which CPU machines lack
    except ImportError as exc:
        log.debug("driver version unknown: pynvml not importable (%s)", exc)
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError subclasses; LibraryNotFound on CPUs
        log.debug("driver version unknown: nvmlInit failed (%s)", exc)
        return None
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception as exc:
        log.debug("driver version unknown: nvmlSystemGetDriverVersion failed (%s)", exc)
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception as exc:
            log.debug("nvmlShutdown failed (%s)", exc)


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str | None]:
    """Versions of everything that shapes a result (cached for the process).

    Returns:
        {"python", "torch", "triton", "cuda" (torch's CUDA runtime), "hip", "driver",
        "device"} — each a string, or None when not present on this machine.
    """
    info: dict[str, str | None] = {"python": platform.python_version()}
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    info["torch"] = torch.__version__ if torch is not None else None
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info["cuda"] = getattr(torch.version, "cuda", None) if torch is not None else None
    info["hip"] = getattr(torch.version, "hip", None) if torch is not None else None
    info["driver"] = _driver_version() if info["cuda"] else None
    device = None
    if torch is not None and torch.cuda.is_available():
        device = torch.cuda.get_device_name(torch.cuda.current_device())
    info["device"] = device or f"cpu ({platform.machine()})"
    return info


def git_rev(path: str | Path | None = None) -> str | None:
    """HEAD commit of the repository containing `path` (default: this package's checkout).

    Returns:
        The 40-hex sha, with "-dirty" appended when tracked files have uncommitted changes;
        None outside a repository, without git, or before the first commit. Never raises.
    """
    cwd = Path(path) if path is not None else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=cwd,
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=cwd, capture_output=True, text=True, timeout=10,
                                check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        log.debug("git revision unknown for %s: %s", cwd, exc)
        return None
    if not sha:
        return None
    return f"{sha}-dirty" if status else sha
