"""Compatibility: loading, profiling and ranking a model live in `porter.model` (`load`,
`profile`, `rank`, `report`)."""

from __future__ import annotations

from porter.model.load import HF_CONFIGS
from porter.model.load import HF_SIZES
from porter.model.load import CausalLMLogits
from porter.model.load import ModelLoadError
from porter.model.load import build_hf
from porter.model.load import load_model
from porter.model.load import trace_any
from porter.model.profile import profile_model
from porter.model.rank import OURS_BW_FRACTION
from porter.model.rank import amdahl
from porter.model.rank import combined_gain
from porter.model.rank import generator_family
from porter.model.rank import rank_groups
from porter.model.report import PROFILE_FORMAT
from porter.model.report import format_profile
from porter.model.report import read_profile
from porter.model.report import save_profile

__all__ = ["HF_CONFIGS", "HF_SIZES", "OURS_BW_FRACTION", "PROFILE_FORMAT", "CausalLMLogits",
           "ModelLoadError", "amdahl", "build_hf", "combined_gain", "format_profile",
           "generator_family", "load_model", "profile_model", "rank_groups", "read_profile",
           "save_profile", "trace_any"]
