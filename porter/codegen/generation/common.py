"""What every family's generator shares: the template context of the op and the launcher's
heuristics source."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from porter.codegen import dtypes
from porter.codegen import fastmath
from porter.codegen import heuristics
from porter.codegen.fusion import FusionReport
from porter.codegen.ir import Graph
from porter.codegen.kernel_args import KernelArgs
from porter.codegen.kernel_args import sym_to_python
from porter.codegen.templates import safe_name


def common_ctx(name: str, family: str, g: Graph, fusion: FusionReport, args: KernelArgs
                ) -> dict[str, Any]:
    specs = []
    for j, o in enumerate(g.outputs):
        shape = [sym_to_python(s, g.symbols) for s in o.shape]
        specs.append((shape, f"out_dtypes[{j}]"))
    table, rules = g.out_dtype_table, g.out_dtype_rules
    first = next(i for i, x in enumerate(g.inputs) if x is not None)
    op = {"name": name, "family": family, "fused_ops": list(fusion.ops) or ["(none)"],
          "n_args": len(g.inputs), "tuple_output": g.tuple_output, "first_tensor": first,
          "scalar_args": sorted((i, repr(v)) for i, v in g.scalar_args.items()),
          "out_specs": specs, "dtype_table": dtypes.table_source(table),
          "dtype_rules": dtypes.rules_source(rules),
          "resolve_source": inspect.getsource(dtypes.resolve_out_dtypes),
          "fastmath_source": fastmath.triton_source() if any(
              n.op == "pw" and n.attrs.get("fn") == "erf" for n in g.live()) else ""}
    return {"op": op, "kname": "_" + safe_name(name), "params": args.declared(),
            "launch_exprs": args.launch_exprs}


def heuristics_source(*fns: Callable[..., Any]) -> str:
    return "\n\n".join([inspect.getsource(heuristics._next_pow2)] +
                       [inspect.getsource(f) for f in fns])
