"""The offline Planner: the shapes on the device's roofline and the knobs to try first
(`porter.planner`, rules and the hardware model)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from porter.roles.base import RULES

if TYPE_CHECKING:
    from porter.roles.artifacts import TuningPlan
    from porter.roles.base import PlanRequest
    from porter.roles.base import TargetContext


class RulePlanner:
    name = "planner"
    implementation = RULES

    def plan(self, ctx: TargetContext, request: PlanRequest) -> TuningPlan:
        from porter import planner
        from targets.dtypes import torch_dtype

        return planner.plan(ctx.problem, ctx.hw, [tuple(s) for s in request.shapes],
                            [torch_dtype(d) for d in request.dtypes], family=request.family)
