"""Metal Shading Language emission for the elementwise, rowwise and matmul families, for Apple GPUs.

Written the way Apple GPUs want it (SIMD-groups of 32 threads, 32 KB of threadgroup memory):

- rowwise: a reduction is a SIMD-group reduction in registers (`simd_sum`/`simd_max`); with one
  threadgroup per row (`rows` 1) the per-SIMD-group partials meet in THREADS/32 floats of
  threadgroup memory, and with one SIMD-group per row (`rows` = threads/32, for short rows) there
  is no threadgroup memory and no barrier at all;
- indices are 32-bit (`index` "i32") when every buffer the bucket's shapes touch holds < 2^31
  elements (the host refuses larger ones), else 64-bit;
- rows (or flat ranges) are loaded and stored as 2- or 4-wide vectors (`vec`) when the host
  finds them aligned (`vec_ok`, worked out from strides and storage offsets), else scalar;
- matmul with an epilogue: 8x8 `simdgroup_float8x8` matrices, four SIMD-groups per
  TILE x TILE output tile, A and B staged through threadgroup memory BK at a time.

Each source carries its dispatch (buffer order, roles, the host expressions of every scalar, the
grid and threadgroup sizes) as one `// porter-dispatch: {json}` line, read by
`targets.metal_host` for the CPU executor and for the MPS backend on a Mac.
"""

from __future__ import annotations

from porter.codegen.metal.config import SIMD_WIDTH
from porter.codegen.metal.config import MetalConfig
from porter.codegen.metal.config import default_config
from porter.codegen.metal.config import variant_space
from porter.codegen.metal.dispatch import DISPATCH_FORMAT
from porter.codegen.metal.rendering import dispatch_of
from porter.codegen.metal.rendering import render

__all__ = ["DISPATCH_FORMAT", "SIMD_WIDTH", "MetalConfig", "default_config", "dispatch_of",
           "render", "variant_space"]
