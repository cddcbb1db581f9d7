"""Learn how a user's launcher launches its Triton kernels by running it, the way a profiler would.

A launcher (``rmsnorm_forward(x, w)``, Liger's ``rms_norm_forward(X, W, eps, ...)``, a tutorial's
``softmax(x)``) computes its grid, constexprs (``BLOCK_SIZE``, ``NUM_STAGES``), ``num_warps`` and
``num_stages`` from its inputs and the device, then calls ``kernel[grid](...)``. `intercept`
patches the launch path of every Triton kernel for the duration of one call:

- ``JITFunction.run`` and ``InterpretedFunction.run`` (each ``kernel[grid](...)`` lands there):
  the launch is recorded as a `Launch` (kernel, grid, runtime arguments, constexprs, options) and,
  with ``execute=True``, really run (under the interpreter on CPU tensors, or on the GPU);
  ``overrides`` (``num_warps``, ``num_stages``, ``waves_per_eu``, a constexpr ...) replace what
  the launcher chose, which is how the porter retunes a kernel without editing its launcher;
- ``Autotuner.run``: on a CPU nothing can be benchmarked, so the first config (or the one the
  override ``autotune`` picks) is applied and the configs are recorded as the kernel's variant
  space; ``@triton.heuristics`` run as they do (they are plain functions of the arguments).

While recording for a target, the launcher's device questions are answered from that target's
hardware model (`device_answers`): ``torch.cuda.get_device_properties(...)``,
``torch.cuda.get_device_capability()``, ``torch.version.hip`` (Liger's ``is_hip()``) and
``triton.runtime.driver.active`` (``utils.get_device_properties``, ``get_current_target``), so a
launcher that sizes its grid by SM count or picks warps by vendor does so for the target.

Recording runs the launcher on meta tensors (sizes only: nothing is allocated, so GPU-size
shapes cost nothing) and, when the launcher needs real data (``.item()``, a data-dependent
branch), on CPU tensors at the reduced shape the caller passes instead.
"""

from __future__ import annotations

from porter.recorder.blockers import blocker
from porter.recorder.capture import intercept
from porter.recorder.capture import record
from porter.recorder.device import capability
from porter.recorder.device import device_answers
from porter.recorder.device import device_properties
from porter.recorder.device import triton_properties
from porter.recorder.launch import AUTOTUNE_KEY
from porter.recorder.launch import OPTION_NAMES
from porter.recorder.launch import Launch
from porter.recorder.launch import RecordError
from porter.recorder.launch import config_dict
from porter.recorder.launch import innermost

__all__ = ["AUTOTUNE_KEY", "OPTION_NAMES", "Launch", "RecordError", "blocker", "capability",
           "config_dict", "device_answers", "device_properties", "innermost", "intercept",
           "record", "triton_properties"]
