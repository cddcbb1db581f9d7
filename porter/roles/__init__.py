"""The porter's team: six roles with typed, serialisable inputs and artifacts.

`porter.roles.base` holds the interfaces (`Planner`, `Search`, `KernelWriter`, `Benchmark`,
`Debugger`, `Profiler`), their requests and `Team`; `porter.roles.artifacts` the artifacts they
hand each other and write per target. The offline (rule-based) implementations live one per
module next to them; `rules_team()` assembles them. The loop that drives a team is
`porter.loop`.
"""

from __future__ import annotations

from porter.roles.artifacts import BenchRow
from porter.roles.artifacts import Candidates
from porter.roles.artifacts import DebugReport
from porter.roles.artifacts import Diagnosis
from porter.roles.artifacts import KernelSource
from porter.roles.artifacts import ProfileReport
from porter.roles.artifacts import ShapePlan
from porter.roles.artifacts import TuningPlan
from porter.roles.artifacts import UnitCandidates
from porter.roles.artifacts import UnitProfile
from porter.roles.base import Benchmark
from porter.roles.base import Debugger
from porter.roles.base import DebugRequest
from porter.roles.base import Exchange
from porter.roles.base import JudgeRequest
from porter.roles.base import KernelWriter
from porter.roles.base import Planner
from porter.roles.base import PlanRequest
from porter.roles.base import Profiler
from porter.roles.base import ProfileRequest
from porter.roles.base import Search
from porter.roles.base import SearchRequest
from porter.roles.base import TargetContext
from porter.roles.base import Team
from porter.roles.base import WriteRequest


def rules_team() -> Team:
    """The offline team: rules, templates and the hardware model behind every role."""
    from porter.roles.benchmark import HarnessBenchmark
    from porter.roles.debugger import RuleDebugger
    from porter.roles.planner import RulePlanner
    from porter.roles.profiler import StaticProfiler
    from porter.roles.search import RuleSearch
    from porter.roles.writer import TemplateWriter

    return Team(planner=RulePlanner(), search=RuleSearch(), writer=TemplateWriter(),
                benchmark=HarnessBenchmark(), debugger=RuleDebugger(), profiler=StaticProfiler())


__all__ = [
    "BenchRow", "Benchmark", "Candidates", "DebugReport", "DebugRequest", "Debugger",
    "Diagnosis", "Exchange", "JudgeRequest", "KernelSource", "KernelWriter", "PlanRequest",
    "Planner", "ProfileReport", "ProfileRequest", "Profiler", "Search", "SearchRequest",
    "ShapePlan", "TargetContext", "Team", "TuningPlan", "UnitCandidates", "UnitProfile",
    "WriteRequest", "rules_team",
]
