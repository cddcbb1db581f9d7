"""Build a model to profile: a KernelBench level-3 style file (`Model`, `get_inputs`,
`get_init_inputs`) or a Hugging Face causal LM from its config (random weights, nothing
downloaded), and trace it to torch.fx (fx's tracer, else TorchDynamo's export)."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from porter.errors import PorterError
from porter.model.graph import ModelTraceError
from porter.model.graph import TracedModel
from porter.model.graph import trace_model

HF_SIZES: dict[str, dict[str, int]] = {
    "toy": {"hidden_size": 64, "intermediate_size": 160, "num_attention_heads": 4,
            "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 256,
            "batch": 2, "seq": 8},
    "realistic": {"hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 32000,
                  "batch": 4, "seq": 2048},
}
# Gemma: its RMSNorm scales by (1 + weight) and its MLP is GELU(tanh)-and-multiply; Qwen3 has an
# RMSNorm on q and k inside attention (what the in-place patch finds without being told).
HF_CONFIGS = {"llama": "LlamaConfig", "qwen2": "Qwen2Config", "qwen3": "Qwen3Config",
              "mistral": "MistralConfig", "gemma": "GemmaConfig"}


class ModelLoadError(PorterError):
    """A model file or architecture cannot be built; the message says what to do."""


def load_model(path: str | os.PathLike[str], *, size: str | None = None,
               device: str = "cpu") -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Build a KernelBench level-3 style model file (`Model`, `get_inputs`, `get_init_inputs`).

    Args:
        path: the Python file.
        size: passed to `get_init_inputs(size)` / `get_inputs(size)` when they take an argument
            (the example model's "toy" / "realistic").
        device: where the model and its inputs go ("cpu", "cuda").

    Returns:
        (model in eval mode, inputs, source description for the profile).

    Raises:
        ModelLoadError: missing file or names, or a failure building the model.
    """
    from porter.specs.opspec import import_file

    p = Path(path)
    if not p.is_file():
        raise ModelLoadError(f"{p}: no such file (give a Python file defining Model, get_inputs "
                             "and get_init_inputs)")
    module = import_file(p, tag="model")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ModelLoadError(f"{p}: defines no {', '.join(missing)} (KernelBench level-3 format)")

    def call(fn: Any) -> Any:
        takes = bool(inspect.signature(fn).parameters)
        if size is not None and not takes:
            raise ModelLoadError(f"{p}: {fn.__name__}() takes no size, but --size {size} given")
        return fn(size) if (takes and size is not None) else fn()

    try:
        init = call(module.get_init_inputs)
        model = module.Model(*init)
        inputs = tuple(call(module.get_inputs))
        dtype = call(module.get_dtype) if hasattr(module, "get_dtype") else None
    except ModelLoadError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's model code, reported in one line
        raise ModelLoadError(f"{p}: building the model failed: {type(exc).__name__}: "
                             f"{exc}") from None
    if dtype is None:
        dtype = next((t.dtype for t in inputs if isinstance(t, torch.Tensor)
                      and t.is_floating_point()), torch.float32)
    model = model.to(device=device, dtype=dtype).eval()
    inputs = tuple(t.to(device) if isinstance(t, torch.Tensor) else t for t in inputs)
    return model, inputs, {"kind": "file", "path": str(p), "size": size,
                           "dtype": str(dtype).removeprefix("torch.")}


def build_hf(arch: str, *, size: str = "toy", device: str = "cpu",
             dtype: torch.dtype | None = None,
             ) -> tuple[torch.nn.Module, tuple[Any, ...], dict[str, Any]]:
    """A Hugging Face causal LM built from its config with random weights (nothing downloaded).

    Raises:
        ModelLoadError: transformers is not installed, or the architecture/size is unknown.
    """
    try:
        import transformers
    except ImportError:
        raise ModelLoadError("--hf needs the transformers package: pip install "
                             "'kernel-porter[models]'") from None
    if arch not in HF_CONFIGS:
        raise ModelLoadError(f"unknown --hf architecture {arch!r}; choose from "
                             f"{', '.join(sorted(HF_CONFIGS))}")
    if size not in HF_SIZES:
        raise ModelLoadError(f"unknown --size {size!r}; choose from {', '.join(HF_SIZES)}")
    s = dict(HF_SIZES[size])
    batch, seq = s.pop("batch"), s.pop("seq")
    if not hasattr(transformers, HF_CONFIGS[arch]):
        raise ModelLoadError(f"--hf {arch}: transformers {transformers.__version__} has no "
                             f"{HF_CONFIGS[arch]}; upgrade transformers")
    s["head_dim"] = s["hidden_size"] // s["num_attention_heads"]  # Gemma's default is 256
    cfg = getattr(transformers, HF_CONFIGS[arch])(**s, max_position_embeddings=max(seq, 128))
    cfg._attn_implementation = "sdpa"
    lm = transformers.AutoModelForCausalLM.from_config(cfg)
    dtype = dtype or (torch.bfloat16 if size == "realistic" else torch.float32)
    model = CausalLMLogits(lm).to(device=device, dtype=dtype).eval()
    ids = torch.randint(0, s["vocab_size"], (batch, seq), device=device)
    return model, (ids,), {"kind": "hf", "arch": arch, "size": size,
                           "dtype": str(dtype).removeprefix("torch."),
                           "transformers": transformers.__version__}


def trace_any(model: torch.nn.Module, inputs: Sequence[Any], source: dict[str, Any]) -> TracedModel:
    """The model's fx graph at torch-op level: torch.fx's tracer, else TorchDynamo's export.

    torch.fx traces modules through (and keeps Linear and activation modules whole); a model it
    cannot trace (a Hugging Face model: masks built under vmap, caches) is captured by
    `torch._dynamo.export`, one graph with the parameters as attributes.

    Raises:
        ModelTraceError: neither can capture the model as one graph.
    """
    if source.get("kind") != "hf":
        try:
            return trace_model(model, inputs)
        except ModelTraceError as exc:
            first = str(exc)
    else:
        first = ""
    try:
        with torch.no_grad():
            gm, _ = torch._dynamo.export(model)(*inputs)
    except Exception as exc:  # noqa: BLE001 - reported in one line with the fx failure
        why = f"torch._dynamo.export cannot capture it as one graph: {type(exc).__name__}: " \
              f"{str(exc).splitlines()[0] if str(exc) else ''}"
        raise ModelTraceError(f"{first}; {why}" if first else why) from None
    from torch.fx.passes.shape_prop import ShapeProp

    with torch.no_grad():
        ShapeProp(gm).propagate(*inputs)
    return TracedModel(gm, tuple(inputs))


class CausalLMLogits(torch.nn.Module):
    """A Hugging Face causal LM called as `model(input_ids) -> logits`, no cache: one graph."""

    def __init__(self, lm: torch.nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits
