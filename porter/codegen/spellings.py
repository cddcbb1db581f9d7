"""How each IR pointwise function and dtype is spelled in Triton and in Metal, and the
functions whose masked-lane values codegen works out ahead."""

from __future__ import annotations

import torch

# Triton spelling of each IR pointwise function (arguments already fp32/int/bool values).
LOG2E = "1.4426950408889634"  # exp(x) = exp2(x * log2 e)
TRITON_FN = {
    # div: IEEE round-to-nearest, as PyTorch does; plain `/` is an approximate (2 ulp) division on
    # NVIDIA, which breaks e.g. layernorm of a constant row (sum/n != x exactly -> x - mean != 0).
    "add": "({0} + {1})", "sub": "({0} - {1})", "mul": "({0} * {1})",
    "div": "tl.math.div_rn(tl.cast({0}, tl.float32), tl.cast({1}, tl.float32))",
    # exp as exp2: tl.exp is ex2.approx.f32 on NVIDIA, whose subnormal results cost three more
    # instructions per element (a compare and two scaling multiplies); tl.exp2 is the .ftz
    # form, which flushes results under 2^-126 to 0 (bench/NOTES.md item 30)
    "neg": "(-{0})", "exp": "tl.exp2(({0}) * " + LOG2E + ")", "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})", "erf": "tl.erf({0})", "sigmoid": "tl.sigmoid({0})",
    # tanh(x) = 1 - 2 / (exp(2x) + 1): saturates cleanly to +-1 for large |x| (no inf/inf).
    "tanh": "(1.0 - 2.0 / (tl.exp2(2.8853900817779268 * {0}) + 1.0))",
    "abs": "tl.abs({0})", "reciprocal": "(1.0 / {0})",
    # log1p/expm1 without cancellation for tiny |x| (Goldberg's and Kahan's corrections):
    # u = 1 + x rounds; log(u) * x / (u - 1) restores the lost bits. Branch-free via where.
    "log1p": "tl.log(1.0 + {0})",  # see Emitter._log1p/_expm1
    "expm1": "(tl.exp2(({0}) * " + LOG2E + ") - 1.0)",
    "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "exp2": "tl.exp2({0})", "log2": "tl.log2({0})", "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})", "maximum": "tl.maximum({0}, {1})", "minimum": "tl.minimum({0}, {1})",
    "eq": "({0} == {1})", "ne": "({0} != {1})", "lt": "({0} < {1})", "le": "({0} <= {1})",
    "gt": "({0} > {1})", "ge": "({0} >= {1})", "and": "({0} & {1})", "or": "({0} | {1})",
    "xor": "({0} ^ {1})", "ne_bool": "(({0} != 0) != ({1} != 0))",
    "where": "tl.where({0}, {1}, {2})",
    "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",
}
METAL_FN = {
    **{k: v for k, v in TRITON_FN.items() if v.startswith("(")},
    "div": "({0} / {1})",  # Metal's float division is IEEE-correct by default (no fast-math)
    "exp": "exp({0})", "log": "log({0})", "sqrt": "sqrt({0})", "rsqrt": "rsqrt({0})",
    "erf": "porter_erf({0})", "sigmoid": "(1.0f / (1.0f + exp(-{0})))",
    "tanh": "precise::tanh({0})", "abs": "fabs({0})", "reciprocal": "(1.0f / {0})",
    "log1p": "log(1.0f + {0})", "expm1": "(exp({0}) - 1.0f)",
    "sin": "sin({0})",
    "cos": "cos({0})", "exp2": "exp2({0})", "log2": "log2({0})", "floor": "floor({0})",
    "ceil": "ceil({0})", "maximum": "fmax({0}, {1})", "minimum": "fmin({0}, {1})",
    "and": "({0} && {1})", "or": "({0} || {1})", "where": "({0} ? {1} : {2})",
    "sign": "sign({0})", "xor": "({0} ^ {1})", "ne_bool": "(({0} != 0) != ({1} != 0))",
}

# Pointwise functions whose value in masked lanes (a load's `other`, then constants) is worked
# out at codegen time, in float32 with IEEE semantics (inf, nan) as the kernel computes it.
MASKED_LANE_FN = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
                  "neg": torch.neg, "exp": torch.exp, "exp2": torch.exp2, "abs": torch.abs,
                  "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "log": torch.log,
                  "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow}

TRITON_DTYPE = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
                torch.float64: "fp64", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
                torch.int8: "i8", torch.uint8: "u8", torch.bool: "i1"}
METAL_DTYPE = {torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat",
               torch.int64: "long", torch.int32: "int", torch.bool: "bool", torch.uint8: "uchar",
               torch.int8: "char", torch.int16: "short"}
