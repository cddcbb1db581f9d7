"""The offline Search role: the generated op's variant space pruned by the hardware model and
the backend, ordered by the plan (`porter.search`), capped; and the spec's own Triton kernel as
extra candidates where the backend runs it (one per combination of the TUNABLES its launcher
accepts; not counted in the cap)."""

from __future__ import annotations

import inspect
import itertools
from typing import TYPE_CHECKING
from typing import Any

from porter.roles.artifacts import ProposedConfig
from porter.roles.artifacts import RejectedConfig
from porter.roles.artifacts import UnitCandidates
from porter.roles.base import RULES

if TYPE_CHECKING:
    from porter.roles.base import SearchRequest
    from porter.roles.base import TargetContext


def existing_configs(spec: Any) -> list[dict[str, Any]]:
    """The spec's existing kernel as configs: {"origin": "existing", knob: value, ...} for
    each combination of the TUNABLES its launcher accepts as parameters (one config, just
    the origin, when it accepts none); [] when the spec has no existing kernel."""
    launcher = getattr(spec, "triton_launcher", None)
    if getattr(spec, "triton_kernel", None) is None or launcher is None:
        return []
    try:
        params = inspect.signature(launcher).parameters
    except (TypeError, ValueError):
        params = {}
    knobs = [k for k, v in (spec.tunables or {}).items()
             if k in params and isinstance(v, (list, tuple)) and v]
    combos = itertools.product(*(spec.tunables[k] for k in knobs)) if knobs else [()]
    return [{"origin": "existing", **dict(zip(knobs, combo, strict=True))} for combo in combos]


def user_candidates(ctx: TargetContext, request: SearchRequest, dtype: Any,
                    rejected: list[RejectedConfig]) -> list[ProposedConfig]:
    """The user's kernel: as shipped, then retuned (`porter.user_kernel.configs`, its launches
    recorded on this target); with TRITON_CONSTEXPRS the launcher-TUNABLES combinations."""
    if getattr(ctx.spec, "triton_constexprs", None) is not None:
        return [ProposedConfig(config=cfg, origin="existing",
                               why="the spec's own kernel (TRITON_KERNEL)")
                for cfg in existing_configs(ctx.spec)]
    from porter.user_kernel import configs

    found, misfits = configs(ctx.spec, ctx.problem, ctx.hw, ctx.backend, tuple(request.shape),
                             dtype, request.max_variants)
    rejected += [RejectedConfig(cfg, (why,)) for cfg, why in misfits]
    return [ProposedConfig(config=cfg, origin="existing",
                           why="the user's kernel " + ("as shipped" if i == 0 else "retuned"))
            for i, cfg in enumerate(found)]


class RuleSearch:
    name = "search"
    implementation = RULES

    def candidates(self, ctx: TargetContext, request: SearchRequest) -> UnitCandidates:
        import torch

        from porter import search
        from targets.dtypes import torch_dtype

        dtype = torch_dtype(request.dtype)
        inputs = ctx.problem.make_inputs(tuple(request.shape), dtype, torch.device("meta"),
                                         torch.Generator().manual_seed(0))
        sr = search.search(ctx.gen_op, ctx.backend, ctx.hw, tuple(inputs), dtype,
                           plan=request.plan, max_variants=None)
        ordered = search.winners_first(sr.candidates, list(request.winners))
        cap = request.max_variants
        kept = ordered if cap is None else ordered[:cap]
        proposed = [ProposedConfig(config=c.config, origin=c.origin) for c in kept]
        if not getattr(ctx.session, "allow_generated", True):
            proposed = []  # --no-allow-generated: only the user's kernel may be packed
        rejected = [RejectedConfig(r.config, tuple(r.reasons)) for r in sr.rejected]
        if ctx.capabilities().runs_existing_kernels:
            proposed += user_candidates(ctx, request, dtype, rejected)
        return UnitCandidates(
            shape=tuple(request.shape), dtype=request.dtype, bucket=request.bucket,
            candidates=tuple(proposed),
            rejected=tuple(rejected),
            space_size=sr.space_size, capped=len(ordered) - len(kept))
