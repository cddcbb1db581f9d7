"""`porter port` with the spec's own TRITON_KERNEL as extra candidates.

This is issue 4's starting point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.porter.test_port_standin import FakeGenerated

ROOT = Path(__file__).resolve().parents[2]


def test_existing_candidates_follow_the_launcher_signature() -> None:
    from porter.roles.search import existing_configs

    def takes_warps(x: Any, w: Any, out: Any = None, num_warps: int = 4) -> Any:
        return out

    def takes_none(x: Any, w: Any, out: Any = None) -> Any:
        return out

    kernel = SimpleNamespace(name="k", source="", constexprs={})
    tun = {"num_warps": [4, 8, 16], "BLOCK_N": [1024, 2048]}
    three = existing_configs(SimpleNamespace(triton_kernel=kernel, triton_launcher=takes_warps,
                                                 tunables=tun))
    assert three == [{"origin": "existing", "num_warps": w} for w in (4, 8, 16)]
    one = existing_configs(SimpleNamespace(triton_kernel=kernel, triton_launcher=takes_none,
                                               tunables=tun))
    assert one == [{"origin": "existing"}]
    assert existing_configs(SimpleNamespace(triton_kernel=None, triton_launcher=None,
                                                tunables={})) == []


class _NoGenerated(FakeGenerated):
    """A stand-in whose every generated config fails to specialize: only the existing kernel
    can be kept, so the test pins the existing path deterministically."""

    def kernel_refs(self, inputs: Any, config: dict[str, int], source_path: str) -> list[Any]:
        raise ValueError("stand-in: no generated kernel")


@pytest.fixture()
def existing_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import porter.port

    monkeypatch.setattr(porter.port, "generate_op", lambda ref, ex, name: _NoGenerated(tmp_path))
    # a stand-in generator's Metal is a placeholder: test the emitted path, not the executor
    from porter.roles.benchmark import CPU_CHECKS
    monkeypatch.delitem(CPU_CHECKS, "emulator", raising=False)
    folder = tmp_path / "rms"
    folder.mkdir()
    shutil.copyfile(ROOT / "examples" / "rmsnorm" / "kernel.py", folder / "kernel.py")
    src = (ROOT / "examples" / "rmsnorm" / "spec.py").read_text()
    src = src.replace("SHAPES = [(4096, 4096)",
                      "SHAPES = [(4096, 4096)]  # test\n_ALL = [(4096, 4096)")
    src = src.replace("INTERPRET_SHAPES = [(7, 129), (33, 1000), (4, 4097), (16, 1024)]",
                      "INTERPRET_SHAPES = [(7, 129), (3, 64)]")
    src = src.replace("DTYPES = [torch.bfloat16, torch.float16, torch.float32]",
                      "DTYPES = [torch.float32]")
    (folder / "spec.py").write_text(src)
    return folder / "spec.py"


def test_port_keeps_the_existing_kernel_and_packs_it(existing_spec: Path, tmp_path: Path) -> None:
    from porter.packs.loader import load_pack
    from porter.packs.verify import read_manifest
    from porter.port import port

    run = tmp_path / "run"
    res = port(existing_spec, ["h100", "mi300x", "m4"], tmp_path / "packs", run_dir=run,
               max_variants=1, progress=lambda line: None)
    by = {t.target: t for t in res.targets}
    for t in ("h100", "mi300x"):
        (choice,) = by[t].choices
        assert choice.origin == "existing" and choice.config == {"origin": "existing"}
        assert choice.tier == "interpreted" and choice.numbers["time_ms"] > 0
    # Metal: the Triton kernel is no candidate there; the generated Metal source is kept
    assert [c.origin for c in by["m4"].choices] == ["generated"]
    assert res.checks_run == 1  # one body: checked once, shared by the other target

    entries = [json.loads(ln) for ln in (run / "ledger.jsonl").read_text().splitlines() if ln]
    kept = [e for e in entries if e["verdict"] == "kept" and e["target"] != "m4"]
    assert len(kept) == 2 and all(e["details"]["origin"] == "existing" for e in kept)
    assert {e["details"]["origin"] for e in entries if e["target"] == "m4"} == {"generated"}
    # the cross-compile really ran for the target (registers from the compiled kernel)
    assert all(k["details"]["kernels"][0]["kernel"] == "_rmsnorm_fwd_kernel" for k in kept)

    manifest = read_manifest(res.pack_path)
    origins = {e["target"]: {b["origin"] for b in e["buckets"]} for e in manifest["entries"]}
    assert origins == {"h100": {"existing"}, "mi300x": {"existing"}, "m4": {"generated"}}
    op = load_pack(res.pack_path, device="cpu")
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(5, 300, generator=gen), torch.randn(300, generator=gen)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(op(x, w), ref, atol=1e-5, rtol=1e-5)

    # The packed file itself (kernel file + generated `launch`) runs standalone under the
    # interpreter in a fresh process (load_pack above may fall back to the reference when an
    # earlier test imported triton uninterpreted in this process).
    (rel,) = {b["file"] for e in manifest["entries"] if e["target"] == "h100" for b in e["buckets"]}
    code = ("import importlib.util, torch\n"
            f"s = importlib.util.spec_from_file_location('m', {str(res.pack_path / rel)!r})\n"
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m)\n"
            "g = torch.Generator().manual_seed(2)\n"
            "x, w = torch.randn(4, 77, generator=g), torch.randn(77, generator=g)\n"
            "out = torch.empty_like(x)\n"
            "y = m.launch(x, w, out=out, config={'origin': 'existing'})\n"
            "ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w\n"
            "assert y is out\n"
            "torch.testing.assert_close(y, ref, atol=1e-5, rtol=1e-5)\n"
            "print('ok')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
