"""bench/probe_cluster_rows.py: its build step records the porter's own launch and builds the
row split over a cluster, on a CPU machine.

The cubins run only on the GPU, where the probe checks each against float64 before timing it.
Here: the recorder captures the generated launcher's kernel, arguments and constexprs and
leaves the module as it was; a built cluster kernel holds half the row's loads of its
single-CTA twin and crosses CTAs through cluster barriers; a run refuses a build made from
other generated source.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench import probe_cluster_rows
from bench.sweep import generated
from porter.codegen import load_generated_module
from targets.triton_cuda import cuobjdump_path

REPO = Path(__file__).resolve().parents[2]
CASE = "softmax:4096x32768:bf16"


def test_the_recorder_captures_the_launchers_own_launch_and_restores_the_module() -> None:
    _, gen_op = generated("softmax")
    module = load_generated_module(gen_op.triton_module_source(), "cluster_test", interpret=True)
    kernel = module._softmax_single_pass_kernel
    x = torch.randn(8, 2048).to(torch.bfloat16)
    cfg = {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 2048, "num_warps": 4}
    fn, grid, args, kwargs, outs = probe_cluster_rows.record_launch(module, (x,), cfg)
    assert fn is kernel
    assert grid == 8
    assert args[0] is x and args[3] is outs[0]
    assert kwargs["EVEN"] is True and kwargs["BLOCK_N"] == 2048 and kwargs["num_warps"] == 4
    assert (kwargs["LANES"], kwargs["VEC"]) == (4 * 32 * 8, 8)
    assert module._softmax_single_pass_kernel is kernel
    module.launch(x, config=cfg)  # the real kernels are back: it runs (interpreted)

    persistent = {**cfg, "strategy": "persistent", "num_stages": 2, "PROGRAMS_PER_SM": 1}
    assert probe_cluster_rows.record_launch(module, (x,), persistent)[1] == -1  # set on the GPU


def _build(out: Path) -> dict:
    # a process of its own: the test session has Triton in interpreter mode
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    cmd = [sys.executable, "bench/probe_cluster_rows.py", "build", "--cases", CASE, "--limit",
           "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    if proc.returncode != 0 and "Triton 3.6 fails" in proc.stderr:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("cluster")
    return out, _build(out)


def _sass(path: Path) -> str:
    proc = subprocess.run([str(cuobjdump_path()), "--dump-sass", str(path)], capture_output=True,
                          text=True, check=True)
    return proc.stdout


@pytest.mark.skipif(cuobjdump_path() is None, reason="no cuobjdump to read the cubin")
def test_the_cluster_kernel_splits_the_row_over_its_ctas(built: tuple[Path, dict]) -> None:
    out, manifest = built
    one, two = manifest["cases"][CASE]["variants"]
    assert (one["num_ctas"], two["num_ctas"]) == (1, 2)
    for rec in (one, two):
        assert rec["constexprs"]["EVEN"] is True and rec["constexprs"]["VEC"] == 8
        # in0_ptr, in0_s0, out0_ptr, out0_s0, n_rows, n_cols: the tensors by their index
        assert [a.get("tensor") for a in rec["runtime"]] == [0, None, 1, None, None, None]
        assert [a.get("int") for a in rec["runtime"][-2:]] == [4096, 32768]
    sass = {rec["num_ctas"]: _sass(out / rec["file"]) for rec in (one, two)}
    loads = {n: len(re.findall(r"LDG\.E\.128", s)) for n, s in sass.items()}
    assert loads[2] * 2 == loads[1]  # each CTA of the pair loads half the row
    assert "UCGABAR_WAIT" in sass[2] and "UCGABAR_WAIT" not in sass[1]


def test_a_run_refuses_a_build_of_other_source(built: tuple[Path, dict], tmp_path: Path) -> None:
    _, manifest = built
    stale = json.loads(json.dumps(manifest))
    stale["cases"][CASE]["source_sha256"] = "0" * 64
    (tmp_path / "manifest.json").write_text(json.dumps(stale))
    with pytest.raises(SystemExit, match="other generated source"):
        probe_cluster_rows.run(tmp_path, tmp_path / "out", 1, [CASE])
    source = generated("softmax")[1].triton_module_source()
    assert manifest["cases"][CASE]["source_sha256"] == probe_cluster_rows.source_sha(source)
