"""env_info: versions recorded with every store row, and a git revision that never raises."""

from __future__ import annotations

import platform
import shutil
import subprocess

import pytest
import torch

from harness import env_info


def test_versions_on_this_machine():
    v = env_info.versions()
    assert v["python"] == platform.python_version()
    assert v["torch"] == torch.__version__
    assert set(v) >= {"python", "torch", "triton", "cuda", "hip", "driver", "device"}
    if not torch.cuda.is_available():
        assert v["device"].startswith("cpu")


def test_git_rev_outside_a_repo_is_none(tmp_path):
    assert env_info.git_rev(tmp_path) is None
    assert env_info.git_rev(tmp_path / "does-not-exist") is None


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_rev_in_a_repo(tmp_path):
    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True, text=True).stdout

    git("init", "-q")
    assert env_info.git_rev(tmp_path) is None  # no commit yet
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("commit", "-q", "-m", "one")
    sha = git("rev-parse", "HEAD").strip()
    assert env_info.git_rev(tmp_path) == sha
    (tmp_path / "f.txt").write_text("b")
    assert env_info.git_rev(tmp_path) == f"{sha}-dirty"
