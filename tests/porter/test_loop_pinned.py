"""A size the generated kernel's trace pinned (a guard of the reference's on the example's
value) is found before any candidate is judged at a shape that does not have it: KernelBench 34
and 35 had their channels pinned to the interpreter's 8, and on an H100 every candidate then
raised the launcher's out-shape check at the file's 64 channels. Such a bucket gets an op of its
own, generated again from the reference traced at its own sizes (on meta tensors), checked and
timed on the device only; where that trace fails too, the port says why it has no kernel."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from porter.codegen import generate
from porter.ledger import Ledger
from porter.loop import pinned_size

SPEC = '''
import torch

NAME = "pinned_s"

def reference(x):
    # a check on the channels, as InstanceNorm's forward does: the trace pins C to the example's
    if x.shape[1] != 8:
        if x.device.type == "meta":  # nor can it be traced at the other shape's own sizes
            raise RuntimeError("this reference needs real tensors at 16 channels")
        x = x * 1.0
    return torch.softmax(x, dim=-1)

def make_inputs(shape, dtype, device, generator):
    x = torch.randn(*shape, generator=generator, device="cpu" if device.type != "meta" else "meta")
    return (x.to(device=device, dtype=dtype),)

SHAPES = [(4, 16, 64)]
DTYPES = [torch.float32]
INTERPRET_SHAPES = [(3, 8, 16)]
'''


def _ref(x: torch.Tensor) -> torch.Tensor:
    if x.shape[1] != 8:
        x = x * 1.0
    return torch.softmax(x, dim=-1)


def test_a_pinned_size_is_named() -> None:
    op = generate(_ref, (torch.randn(3, 8, 16),), name="pinned")
    assert pinned_size(op, (torch.empty(5, 8, 64, device="meta"),)) is None
    why = pinned_size(op, (torch.empty(4, 16, 64, device="meta"),))
    assert why is not None and "input 0's dim 1 fixed at 8" in why and "has 16" in why
    free = generate(lambda x: torch.softmax(x, dim=-1), (torch.randn(3, 8, 16),), name="free")
    assert pinned_size(free, (torch.empty(4, 16, 64, device="meta"),)) is None


def test_the_port_says_why_a_pinned_shape_gets_no_kernel(tmp_path: Path) -> None:
    from porter.port import port

    spec = tmp_path / "pinned_s.py"
    spec.write_text(SPEC)
    res = port(spec, ["h100"], None, run_dir=tmp_path / "run", progress=lambda line: None)
    (target,) = res.targets
    assert not target.choices
    assert any("input 0's dim 1 fixed at 8" in f and "has 16" in f
               and "traced at this shape instead: " in f and "needs real tensors" in f
               for f in target.failures), target.failures


# A size-dependent model, as KernelBench 62's (Linear, then GroupNorm whose group count follows
# the hidden size): looked up by its inputs' shapes, so the symbolic trace pins every size at
# the example's. The first shape is the example's; the second is pinned.
SIZED = '''
import torch
import torch.nn.functional as F

NAME = "lin_gn"

_GROUPS = {}  # the inputs' shapes -> the model's group count


def make_inputs(shape, dtype, device, generator):
    batch, features, hidden = shape
    on = generator.device  # the harness's generator is on the GPU there
    x = torch.randn(batch, features, generator=generator, device=on)
    w = torch.randn(hidden, features, generator=generator, device=on) / features ** 0.5
    b = torch.randn(hidden, generator=generator, device=on)
    gw = 1 + 0.1 * torch.randn(hidden, generator=generator, device=on)
    gb = 0.1 * torch.randn(hidden, generator=generator, device=on)
    _GROUPS[((batch, features), (hidden, features))] = hidden // 8
    return tuple(t.to(device=device, dtype=dtype) for t in (x, w, b, gw, gb))


def reference(x, w, b, gw, gb):
    groups = _GROUPS[tuple(tuple(int(d) for d in t.shape) for t in (x, w))]
    y = F.group_norm(F.linear(x, w, b), groups, gw, gb, eps=1e-5)
    return F.leaky_relu(y, 0.01) * 2


SHAPES = [(16, 32, 64), (64, 32, 128)]
DTYPES = [torch.float32]
INTERPRET_SHAPES = [(16, 32, 64)]
ODD_SHAPES = [(16, 32, 64)]
'''

# Runs a pack file's module under the Triton interpreter at one shape of the spec and prints
# its largest error against the reference (a child: the interpreter is chosen at import).
RUN_AT = '''
import json, sys
import torch
from porter.codegen.loading import load_generated_module
from porter.specs import load_spec
job = json.loads(sys.stdin.read())
spec = load_spec(job["spec"])
inputs = spec.make_inputs(tuple(job["shape"]), torch.float32, torch.device("cpu"),
                          torch.Generator().manual_seed(1))
module = load_generated_module(open(job["file"]).read(), "own_op", True)
got = module.launch(*inputs, config=job["config"])
ref = spec.reference(*(t.double() for t in inputs))
print(float((got.double() - ref).abs().max()))
'''


def _port_sized(tmp_path: Path, monkeypatch: Any, target: str = "h100"
                ) -> tuple[Any, list[Any], Path]:
    import porter.port
    from porter.port import port

    spec = tmp_path / "lin_gn.py"
    spec.write_text(SIZED)
    made: list[Any] = []  # every op the port generates

    def recording(reference: Any, example: Any, name: str) -> Any:
        made.append(generate(reference, example, name=name))
        return made[-1]

    monkeypatch.setattr(porter.port, "generate_op", recording)
    res = port(spec, [target], tmp_path / "packs", run_dir=tmp_path / "run", max_variants=2,
               progress=lambda line: None)
    return res, made, spec


def test_a_pinned_bucket_gets_the_op_traced_at_its_own_sizes(tmp_path: Path,
                                                             monkeypatch: Any) -> None:
    import json
    import subprocess
    import sys

    import yaml

    res, made, spec = _port_sized(tmp_path, monkeypatch)
    # the run's op, traced at the example, pins x at (16, 32); the 64x32 bucket's own op is
    # traced at its sizes, and serves them
    run_op, own_op = made
    assert run_op.graph.inputs[0].shape == (16, 32)
    assert tuple(int(d) for d in own_op.graph.inputs[0].shape) == (64, 32)
    assert pinned_size(own_op, (torch.empty(64, 32, device="meta"),)) is None
    (target,) = res.targets
    assert not target.failures, target.failures
    by_bucket = {c.bucket: c for c in target.choices}
    assert set(by_bucket) == {"16x32", "64x32"}
    # the unpinned bucket: the run's op, checked under the interpreter as before
    assert by_bucket["16x32"].tier == "interpreted"
    assert by_bucket["16x32"].source == run_op.triton_module_source()
    # the pinned one: its own op's source, the compile tier on a CPU, saying why
    pinned = by_bucket["64x32"]
    assert pinned.source == own_op.triton_module_source() != by_bucket["16x32"].source
    assert pinned.tier == "compiled"
    assert any(n.startswith("64x32: the kernel traced at the example sizes has input 0's dim 0 "
                            "fixed at 16") and "checked and timed on the device only" in n
               for n in target.notes), target.notes
    kept = Ledger(tmp_path / "run" / "ledger.jsonl").kept("h100", "64x32", "fp32")
    assert kept is not None and "correctness not checked here" in kept.reason, kept
    # the pack holds each bucket's own module
    manifest = yaml.safe_load((tmp_path / "packs" / "lin_gn" / "manifest.yaml").read_text())
    files = {b["bucket"]: b for b in manifest["entries"][0]["buckets"]}
    pack_file = tmp_path / "packs" / "lin_gn" / files["64x32"]["file"]
    assert pack_file.read_text() == pinned.source
    # and that module is right at its shape (under the interpreter, in a child)
    job = {"spec": str(spec), "shape": [64, 32, 128], "file": str(pack_file),
           "config": files["64x32"]["config"]}
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}
    proc = subprocess.run([sys.executable, "-c", RUN_AT], input=json.dumps(job), text=True,
                          capture_output=True, env=env, cwd=root, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) < 1e-3, proc.stdout


@pytest.mark.gpu
def test_on_the_gpu_a_pinned_bucket_is_checked_and_timed_at_its_shape(
        tmp_path: Path, monkeypatch: Any) -> None:
    import hwmodels

    local = hwmodels.detect().model
    assert local is not None
    res, made, _ = _port_sized(tmp_path, monkeypatch, local.name)
    (target,) = res.targets
    pinned = next(c for c in target.choices if c.bucket == "64x32")
    assert pinned.tier == "measured" and pinned.numbers.get("label") == "measured"
    assert pinned.source == made[1].triton_module_source()
    kept = Ledger(tmp_path / "run" / "ledger.jsonl").kept(local.name, "64x32", "fp32")
    assert kept is not None
    assert "(at (64, 32, 128) only" in kept.details["check"]["message"], kept.details
