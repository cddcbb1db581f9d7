"""Compatibility: a model's fx graph and its fused groups live in `porter.model.graph` and
`porter.model.groups`."""

from __future__ import annotations

from porter.model.graph import LAYOUT
from porter.model.graph import NOT_PORTABLE
from porter.model.graph import POINTWISE
from porter.model.graph import REDUCTIONS
from porter.model.graph import ModelTraceError
from porter.model.graph import TracedModel
from porter.model.graph import classify
from porter.model.graph import node_bytes
from porter.model.graph import node_flops
from porter.model.graph import op_name
from porter.model.graph import rows
from porter.model.graph import trace_model
from porter.model.groups import Group
from porter.model.groups import find_groups
from porter.model.groups import group_bytes

__all__ = ["LAYOUT", "NOT_PORTABLE", "POINTWISE", "REDUCTIONS", "Group", "ModelTraceError",
           "TracedModel", "classify", "find_groups", "group_bytes", "node_bytes", "node_flops",
           "op_name", "rows", "trace_model"]
