"""Template code generation with fusion: from a reference function to Triton (and Metal) source.

    op = generate(reference, example_inputs, name="rmsnorm")
    src = op.triton_module_source()        # one module: kernels + launch(*inputs, out=, config=)
    op.variant_space(hw, shape, dtype)     # configs pruned by the hardware model
    op.fusion.text                         # which ops were fused, bytes saved
"""

from __future__ import annotations

from porter.codegen.errors import UnsupportedOpError
from porter.codegen.fusion import FusionReport
from porter.codegen.generation import generate
from porter.codegen.loading import load_generated_module
from porter.codegen.op import GeneratedOp
from porter.codegen.op import KernelInfo

__all__ = ["FusionReport", "GeneratedOp", "KernelInfo", "UnsupportedOpError", "generate",
           "load_generated_module"]
