"""porter.recorder: a user's launcher run as it is, its launches recorded per target (issue 35)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


def _tutorial_softmax() -> Any:
    from targets.interpreter import import_file

    return import_file(ROOT / "examples" / "softmax_tutorial" / "kernel.py",
                       "_test_recorder_softmax_tutorial", register=False, own_folder=True)


@pytest.mark.parametrize("target, programs, stages, warps", [
    ("h100", 132 * 4, 4, 16),  # 227 KB of shared memory per block: 4 rows in flight
    ("mi300x", 304 * 4, 2, 16),  # 64 KB of LDS: 2
    ("a100", 108 * 4, 2, 16),  # 163 KB: 2
], ids=["h100", "mi300x", "a100"])
def test_launcher_recorded_with_the_targets_device_answers(target: str, programs: int,
                                                           stages: int, warps: int) -> None:
    import hwmodels
    from porter.recorder import record

    mod = _tutorial_softmax()
    x = torch.empty(4096, 32768, dtype=torch.bfloat16, device="meta")  # nothing allocated
    (launch,) = record(lambda: mod.softmax_forward(x), hwmodels.get(target))
    assert launch.kernel == "_softmax_persistent_fwd_kernel"
    assert launch.grid == (programs, 1, 1)
    assert launch.constexprs == {"BLOCK_SIZE": 32768, "NUM_STAGES": stages}
    assert launch.options == {"num_warps": warps}
    assert launch.args["x_ptr"] == "*bf16" and launch.args["n_cols"] == 32768
    assert launch.signature()["stride_xm"] == "i32:16"


def test_overrides_replace_the_launchers_choices_and_everything_is_restored() -> None:
    import triton
    from triton.runtime import jit

    import hwmodels
    from porter.recorder import record

    before = (jit.JITFunction.run, torch.cuda.get_device_properties, torch.version.hip)
    mod = _tutorial_softmax()
    x = torch.empty(64, 1000, dtype=torch.float32, device="meta")
    (launch,) = record(lambda: mod.softmax_forward(x), hwmodels.get("h100"),
                       overrides={"num_warps": 2, "NUM_STAGES": 1, "num_stages": 5})
    assert launch.options == {"num_warps": 2, "num_stages": 5}
    assert launch.constexprs["NUM_STAGES"] == 1 and launch.grid == (64, 1, 1)
    assert launch.launch_config().num_warps == 2
    assert (jit.JITFunction.run, torch.cuda.get_device_properties, torch.version.hip) == before
    assert triton.runtime.driver._active is None or type(
        triton.runtime.driver._active).__name__ != "_FakeDriver"


def test_device_answers_come_from_the_hardware_model() -> None:
    import hwmodels
    from porter.recorder import device_answers

    with device_answers(hwmodels.get("mi300x")):
        props = torch.cuda.get_device_properties(0)
        assert props.multi_processor_count == 304 and props.warp_size == 64
        assert torch.version.hip is not None  # Liger's is_hip()
        import triton

        assert triton.runtime.driver.active.get_current_target().backend == "hip"
    with device_answers(hwmodels.get("h100")):
        assert torch.cuda.get_device_capability() == (9, 0)
        assert torch.version.hip is None
    assert torch.version.hip is None


AUTOTUNED = '''
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                          triton.Config({"BLOCK": 256}, num_warps=8, num_stages=1)],
                 key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def _scale_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2)
    else:
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def scale_forward(x, out=None):
    y = out if out is not None else x.new_empty(x.shape)
    n = x.numel()
    _scale_fwd_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
    return y
'''


def test_autotune_configs_and_heuristics(tmp_path: Path) -> None:
    import hwmodels
    from porter.recorder import record
    from targets.interpreter import import_file

    path = tmp_path / "scale.py"
    path.write_text(textwrap.dedent(AUTOTUNED))
    mod = import_file(path, "_test_recorder_autotuned", register=False, own_folder=True)
    x = torch.empty(1024, device="meta")
    (first,) = record(lambda: mod.scale_forward(x), hwmodels.get("h100"))
    assert first.autotune_configs == ({"BLOCK": 64, "num_warps": 2, "num_stages": 3},
                                      {"BLOCK": 256, "num_warps": 8, "num_stages": 1})
    assert first.constexprs == {"BLOCK": 64, "EVEN": True} and first.heuristics == ("EVEN",)
    assert first.grid == (16,) and first.options["num_warps"] == 2
    (second,) = record(lambda: mod.scale_forward(x), hwmodels.get("h100"),
                       overrides={"autotune": 1})
    assert second.constexprs == {"BLOCK": 256, "EVEN": True} and second.grid == (4,)
    assert second.launch_config().num_warps == 8 and second.launch_config().num_stages == 1


def test_recorded_launch_cross_compiles_for_both_vendors() -> None:
    import hwmodels
    import targets
    from porter.recorder import record

    mod = _tutorial_softmax()
    x = torch.empty(256, 1000, dtype=torch.float16, device="meta")
    for name in ("h100", "mi300x"):
        hw = hwmodels.get(name)
        (launch,) = record(lambda: mod.softmax_forward(x), hw)
        rep = targets.for_device(hw).compile(launch.kernel_ref(), launch.launch_config(), hw)
        assert rep.fits and rep.resources.registers_per_thread > 0, (name, rep.reasons)


def test_blocker_names_an_nvidia_only_construct_in_one_line() -> None:
    import hwmodels
    from porter.recorder import blocker

    src = ('y = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [x], dtype=tl.int32, '
           'is_pure=True, pack=1)')
    line = blocker(src, hwmodels.get("mi300x"), "Triton failed to compile ...")
    assert line == "inline PTX (tl.inline_asm_elementwise) does not build for mi300x (gfx942)"
    assert blocker(src, hwmodels.get("h100"), "") == ""
    assert "\n" not in blocker("x = 1", hwmodels.get("mi300x"), "some\nlong\nerror")
