"""A stand-in for harness.timing.compare in the bench scripts' CPU runs: each provider runs
once (the scripts check outputs before timing) and gets a made-up time, in provider order."""

from __future__ import annotations

from typing import Any

from harness.timing import Comparison
from harness.timing import Timing


def fake_compare(providers: dict[str, Any], make_args: Any, *, hw: Any, reps: int,
                 warmup: int, graph: bool) -> Comparison:
    for fn in providers.values():
        fn(*make_args())
    t = {name: Timing(1.0 + i, 1.0 + i, 1.0 + i, 1.0 + i, 1, "events", samples_ms=(1.0 + i,))
         for i, name in enumerate(providers)}
    return Comparison(timings=t, order=tuple(providers))
