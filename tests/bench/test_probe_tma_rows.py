"""bench/probe_tma_rows.py: its TMA row kernels compute the op (interpreter, on the CPU)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from bench import probe_tma_rows
from bench.sweep import generated


@pytest.mark.parametrize("op", ["softmax", "rmsnorm", "layernorm"])
@pytest.mark.parametrize("tma_store", [True, False])
def test_tma_rows_match_the_reference(op: str, tma_store: bool, monkeypatch) -> None:
    # two "SMs", so that each persistent program walks more than one of the five rows
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda _dev: SimpleNamespace(multi_processor_count=2))
    spec, _ = generated(op)
    gen = torch.Generator().manual_seed(3)
    inputs = spec.make_inputs((5, 1024), torch.float32, torch.device("cpu"), gen)
    want = spec.reference(*[x.double() for x in inputs])
    got = probe_tma_rows.launch(op, tuple(inputs), {"W": 256, "num_warps": 4, "num_stages": 2,
                                                     "tma_store": tma_store})
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


def test_rows_that_are_not_whole_tiles_are_refused() -> None:
    x = torch.randn(3, 1000)
    with pytest.raises(ValueError, match="not whole"):
        probe_tma_rows.launch("softmax", (x,), {"W": 256, "num_warps": 4, "num_stages": 2,
                                                 "tma_store": True})
