"""Template code generation: every family against PyTorch in float64, under the interpreter.

Sizes are small and odd on purpose (7x33, 16x1000, 3x5x40) so masks, non-powers of two and
rank-3 row decomposition are all exercised within the CPU time budget.
"""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from porter.codegen import GeneratedOp  # noqa: E402
from porter.codegen import UnsupportedOpError  # noqa: E402
from porter.codegen import generate  # noqa: E402
from porter.codegen import heuristics  # noqa: E402
from porter.codegen import load_generated_module  # noqa: E402
from porter.codegen.checks import torch_math_calls  # noqa: E402

# Tolerances vs a float64 reference: fp32 I/O is near-exact; 16-bit I/O is bounded by one
# rounding of the output (bf16: 8 mantissa bits) plus the reference's own input rounding.
TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DT_IDS = ["fp32", "fp16", "bf16"]


def _ref64(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
    up = tuple(x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x
               for x in inputs)
    out = fn(*up)
    return out if isinstance(out, tuple) else (out,)


def run_generated(fn: Callable[..., Any], inputs: tuple[Any, ...], name: str,
                  config: dict[str, Any] | None = None, use_out: bool = False
                  ) -> tuple[GeneratedOp, tuple[torch.Tensor, ...]]:
    op = generate(fn, inputs, name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    out = None
    if use_out:
        out = tuple(torch.full(s, float("nan"), dtype=d) for s, d in op.output_spec(inputs))
        out = out if len(out) > 1 else out[0]
    got = mod.launch(*inputs, out=out, config=config)
    if use_out:
        assert got is out
    return op, got if isinstance(got, tuple) else (got,)


def assert_close(got: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...],
                 dtype: torch.dtype) -> None:
    atol, rtol = TOL[dtype]
    assert len(got) == len(ref)
    for g, r in zip(got, ref, strict=True):
        assert g.shape == r.shape, (g.shape, r.shape)
        g64 = g.double()
        err = (g64 - r).abs()
        # written so that NaN fails (a poisoned `out` element left unwritten is NaN), unless
        # the reference has NaN or the same infinity there
        ok = (err <= atol + rtol * r.abs()) | (g64.isnan() & r.isnan()) | (g64 == r)
        bad = ~ok
        if bad.any():
            idx = bad.nonzero()[0].tolist()
            pytest.fail(f"mismatch at {idx}: got {g[tuple(idx)].item()} want "
                        f"{r[tuple(idx)].item()} (max err {err.max().item():.3g})")


def check(fn: Callable[..., Any], inputs: tuple[Any, ...], name: str, dtype: torch.dtype,
          config: dict[str, Any] | None = None, use_out: bool = False) -> GeneratedOp:
    op, got = run_generated(fn, inputs, name, config, use_out)
    assert_close(got, _ref64(fn, inputs), dtype)
    assert torch_math_calls(op.triton_module_source()) == []
    return op


def rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g).to(dtype)


# ---- references -----------------------------------------------------------------------------
def rmsnorm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, 1e-6)


def add_rmsnorm(x, r, w):
    h = x + r
    return F.rms_norm(h, (h.shape[-1],), w, 1e-6), h


def layernorm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


def layernorm_plain(x):
    return F.layer_norm(x, (x.shape[-1],))


def softmax(x):
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    return torch.log_softmax(x, dim=-1)


def cross_entropy(x, t):
    return F.cross_entropy(x, t)


def l2norm(x):
    return F.normalize(x, dim=-1)


def rotary(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat([-x[..., h:], x[..., :h]], dim=-1)
    return x * cos + rot * sin


def gelu_bias(x, b):
    return F.gelu(x + b) + 0.5 * F.gelu(x, approximate="tanh")


def swiglu(a, b):
    return F.silu(a) * b


def clamp_where(x, y):
    return torch.where(x > 0, torch.clamp(x * 2.0, max=1.5), y - 1.0)


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def mm_residual(x, w, r):
    return (x @ w) * 0.5 + r


# ---- elementwise ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_swiglu_flat(dtype: torch.dtype) -> None:
    op = check(swiglu, (rand(7, 33, dtype=dtype), rand(7, 33, dtype=dtype, seed=1)), "swiglu",
               dtype, use_out=True)
    assert op.family == "elementwise"
    assert "_flat_kernel" in op.triton_module_source()


def test_gelu_bias_broadcast_uses_tiled_rows() -> None:
    op = check(gelu_bias, (rand(16, 1000), rand(1000)), "gelu_bias", torch.float32)
    assert op.family == "elementwise"
    assert op.fusion.kernels == 1 and op.fusion.bytes_saved > 0


def test_clamp_where() -> None:
    check(clamp_where, (rand(3, 5, 40), rand(5, 40, seed=3)), "clamp_where", torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_rotary_slices_and_cat_become_index_math(dtype: torch.dtype) -> None:
    x = rand(3, 5, 40, dtype=dtype)
    cos, sin = rand(5, 40, dtype=dtype, seed=1), rand(5, 40, dtype=dtype, seed=2)
    op = check(rotary, (x, cos, sin), "rotary", dtype)
    assert op.fusion.kernels == 1


def test_generated_module_serves_other_shapes() -> None:
    """Sizes are traced symbolically: a module built at 7x33 runs 5x64 and 2x3."""
    op = generate(swiglu, (rand(7, 33), rand(7, 33)), name="swiglu_shapes")
    mod = load_generated_module(op.triton_module_source(), "swiglu_shapes", interpret=True)
    for shape in [(5, 64), (2, 3)]:
        a, b = rand(*shape), rand(*shape, seed=4)
        assert_close((mod.launch(a, b),), _ref64(swiglu, (a, b)), torch.float32)


# ---- rowwise --------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_rmsnorm(dtype: torch.dtype) -> None:
    op = check(rmsnorm, (rand(7, 33, dtype=dtype), rand(33, dtype=dtype)), "rmsnorm", dtype,
               use_out=True)
    assert op.family == "rowwise"


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_softmax(dtype: torch.dtype) -> None:
    check(softmax, (rand(16, 1000, dtype=dtype),), "softmax", dtype)


@pytest.mark.parametrize(("fn", "args"), [
    (layernorm, lambda: (rand(7, 33), rand(33, seed=1), rand(33, seed=2))),
    (layernorm_plain, lambda: (rand(7, 33),)),
    (log_softmax, lambda: (rand(3, 5, 40),)),
    (l2norm, lambda: (rand(16, 1000),)),
], ids=["layernorm", "layernorm_no_affine", "log_softmax_rank3", "l2norm"])
def test_rowwise_family(fn: Callable[..., Any], args: Callable[[], tuple[Any, ...]]) -> None:
    check(fn, args(), fn.__name__, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_add_rmsnorm_two_outputs(dtype: torch.dtype) -> None:
    x, r, w = rand(7, 33, dtype=dtype), rand(7, 33, dtype=dtype, seed=1), rand(33, dtype=dtype)
    op = check(add_rmsnorm, (x, r, w), "add_rmsnorm", dtype, use_out=True)
    assert len(op.output_spec((x, r, w))) == 2
    assert op.fusion.kernels == 1


@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_cross_entropy_two_stage(dtype: torch.dtype) -> None:
    x = rand(16, 1000, dtype=dtype)
    t = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(0))
    t[3] = -100  # ignore_index: excluded from the mean
    op = check(cross_entropy, (x, t), "cross_entropy", dtype)
    src = op.triton_module_source()
    assert "_post_kernel" in src and op.fusion.kernels == 2


def test_fold_over_more_rows_than_one_block() -> None:
    # The fold kernel's block covers up to 2048 rows (heuristics.fold_config); 9001 rows make it
    # loop, and every row must count once (a skipped or doubled block shifts the mean).
    def mse(a, b):
        return ((a - b) ** 2).mean()

    a, b = rand(9001, 3), rand(9001, 3, seed=1)
    op = check(mse, (a, b), "mse_fold", torch.float32)
    (post,) = [r for r in op.kernel_refs((a, b)) if r.name.endswith("_post_kernel")]
    assert post.constexprs["BLOCK"] == 2048
    assert heuristics.fold_config(4096) == {"BLOCK": 2048, "num_warps": 4, "MAX_SPINS": 1 << 22}
    assert heuristics.fold_config(7) == {"BLOCK": 1024, "num_warps": 4, "MAX_SPINS": 1 << 22}
    # after the grid (no early launch, or a captured call): one block as wide as the rows
    assert heuristics.fold_config(4097, beside_grid=False)["BLOCK"] == 8192
    assert heuristics.fold_config(4097, beside_grid=False)["num_warps"] == 16


def _kernel_body(src: str, name: str) -> list[str]:
    """The statements of kernel `name` (after its signature), without comment lines."""
    start = src.index(f"def {name}(")
    body = src[src.index("):\n", start) + 3:src.index("\n\n\n", start)]
    return [ln for ln in body.splitlines() if not ln.strip().startswith("#")]


def test_fold_launches_early_and_waits_on_stamped_words() -> None:
    # Programmatic dependent launch: every main kernel lets the fold launch first thing, and only
    # where _pdl says so (never on the CPU interpreter, where the constexpr branches are dead).
    # The fold does not wait for the whole grid (griddepcontrol.wait) outside CUDA-graph capture:
    # it polls its words until each carries the call's stamp, reading past L1 (volatile), and
    # never writes them.
    x = rand(16, 1000)
    t = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(0))
    op = check(cross_entropy, (x, t), "cross_entropy_pdl", torch.float32)
    src = op.triton_module_source()
    for strategy in ("single_pass", "looped", "persistent", "two_block"):
        body = _kernel_body(src, f"_cross_entropy_pdl_{strategy}_kernel")
        assert body[:2] == ["    if PDL:", "        tl.extra.cuda.gdc_launch_dependents()"]
        stores = [ln for ln in body if "tl.store(words_ptr" in ln]
        assert len(stores) >= 2 and all("stamp | (" in ln for ln in stores), strategy
    post_lines = _kernel_body(src, "_cross_entropy_pdl_post_kernel")
    # the grid wait only under CUDA-graph capture, where the launcher sets GRID_WAIT
    assert post_lines[:2] == ["    if GRID_WAIT:", "        tl.extra.cuda.gdc_wait()"]
    assert "GRID_WAIT=captured and pdl," in src
    post = "\n".join(post_lines[2:])
    assert "gdc_wait" not in post and "while (" in post and "spins < MAX_SPINS" in post
    assert post.count("volatile=True") == 4  # two words per row, before and inside the poll
    assert "tl.store(words_ptr" not in post
    assert '**({"launch_pdl": True} if pdl else {})' in src
    mod = load_generated_module(src, "cross_entropy_pdl_host", interpret=True)
    assert mod._pdl(torch.device("cpu")) is False
    # an op without a fold has no such launch
    sm = generate(softmax, (x,), name="softmax_no_pdl").triton_module_source()
    assert "PDL" not in sm and "gdc_" not in sm and "words_ptr" not in sm


def _fold_module(name: str) -> Any:
    x = rand(16, 1000)
    t = torch.randint(0, 1000, (16,), generator=torch.Generator().manual_seed(0))
    op = generate(cross_entropy, (x, t), name=name)
    return load_generated_module(op.triton_module_source(), name, interpret=True)


def test_fold_words_take_a_higher_stamp_each_call() -> None:
    # A call whose fold never ran (interrupted between the two launches) leaves its words
    # stamped; every later call on those words has a higher stamp, so its fold does not take
    # them for its own. The words are never cleared: a fresh zeroed buffer where they grow and
    # where the epochs would run out.
    mod = _fold_module("cross_entropy_words")
    dev = torch.device("cpu")
    words, stamp, captured = mod._fold_words(dev, 32)
    again, stamp2, _ = mod._fold_words(dev, 32)
    assert again is words and stamp2 == stamp + (1 << 32) and stamp % (1 << 32) == 0
    assert captured is False
    bigger, stamp3, _ = mod._fold_words(dev, 5000)  # more rows: fresh zeros, epochs from 1
    assert bigger.numel() >= 5000 and bool((bigger == 0).all()) and stamp3 == 1 << 32
    # another thread: its own words, so no other call runs between a call's two launches
    import threading

    other = []
    th = threading.Thread(target=lambda: other.append(mod._fold_words(dev, 32)))
    th.start()
    th.join()
    assert other[0][0] is not bigger and other[0][1] == 1 << 32
    # epochs in 1 .. 2**31 - 1 (a stamp is never a fresh word's, never negative); where they
    # would run out, fresh zeros, so that no word left from before holds a stamp used again
    key = next(k for k in mod._WORDS if k[2] == threading.get_ident())
    bigger.fill_(5 << 32)
    mod._WORDS[key] = (bigger, 2**31 - 1)
    fresh, stamp4, _ = mod._fold_words(dev, 32)
    assert fresh is not bigger and bool((fresh == 0).all()) and stamp4 == 1 << 32
    # a full call leaves each word it used with its stamp, under any strategy
    for seed, strategy in enumerate(("looped", "single_pass", "persistent", "two_block")):
        x = rand(37, 1023, seed=seed)
        t = torch.randint(0, 1023, (37,), generator=torch.Generator().manual_seed(seed))
        t[3] = -100
        block_n = {"looped": 256, "two_block": 512}.get(strategy, 1024)
        cfg = {"strategy": strategy, "ROWS": 2, "BLOCK_N": block_n, "num_warps": 2,
               "BLOCK_TAIL": 512}
        got = mod.launch(x, t, config=cfg)
        want = F.cross_entropy(x.double(), t)
        assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item()), strategy
        words, epoch = mod._WORDS[key]
        assert bool((words[:2 * 37] >> 32 == epoch).all()), strategy


def test_fold_returns_nan_rather_than_hang_on_words_never_stamped() -> None:
    # The fold polls a block of words at most MAX_SPINS times; words that never carry the
    # call's stamp (a stale call's, or never written) give NaN, not another call's values.
    mod = _fold_module("cross_entropy_spins")
    x = rand(8, 1000)
    t = torch.randint(0, 1000, (8,), generator=torch.Generator().manual_seed(0))
    out = torch.empty((), dtype=torch.float32)
    bits = torch.tensor([1.0] * 8 + [2.5] * 8, dtype=torch.float32).view(torch.int32)
    low = bits.to(torch.int64) & 0xFFFFFFFF

    def fold(words: torch.Tensor, stamp: int) -> float:
        out.fill_(-1.0)
        mod._cross_entropy_spins_post_kernel[(1,)](
            *[{"words_ptr": words, "stamp": stamp, "out0_ptr": out, "n_rows": 8}.get(p, v)
              for p, v in _post_args(mod, x, t)], BLOCK=1024, MAX_SPINS=3, GRID_WAIT=False)
        return out.item()

    assert fold(low | (7 << 32), 7 << 32) == 2.5  # (8 * 2.5) / (8 * 1.0): the mean loss
    assert torch.isnan(torch.tensor(fold(low | (6 << 32), 7 << 32)))  # last call's words


def _post_args(mod: Any, x: torch.Tensor, t: torch.Tensor) -> list[tuple[str, Any]]:
    """The post kernel's runtime parameters with the launcher's values for (x, t)."""
    import inspect

    params = [p for p in inspect.signature(mod._cross_entropy_spins_post_kernel.fn).parameters
              if p not in ("BLOCK", "MAX_SPINS", "GRID_WAIT")]
    given = {"in0_ptr": x, "in0_s0": x.stride(0), "in0_cs1": x.stride(1), "in0_s1": x.stride(1),
             "in1_ptr": t, "in1_s0": t.stride(0), "sz0": x.shape[1]}
    return [(p, given.get(p)) for p in params]


def test_looped_layernorm_var1_keeps_its_sums_in_each_thread() -> None:
    # One pass over the row for both sums, each thread keeping one (sum, sum of squares) pair
    # (a 4-D view of the chunk summed over the thread's own repetitions and elements); the
    # block combines once per row, after the loop (bench/NOTES.md item 40).
    x, w, b = rand(4, 300), rand(300, seed=1), rand(300, seed=2)
    op = check(layernorm, (x, w, b), "layernorm_looped_lanes", torch.float32,
               config={"strategy": "looped", "ROWS": 1, "BLOCK_N": 128, "num_warps": 1,
                       "VAR1": True}, use_out=True)
    src = op.triton_module_source()
    body = _kernel_body(src, "_layernorm_looped_lanes_looped_kernel")
    (_, branch) = _var1_branches("\n".join(body))  # the SHIFT body's, then the kernel's own
    loop = branch[branch.index("for start in range("):branch.index("tl.reduce((")]
    assert "[ROWS, BLOCK_N // LANES, LANES // VEC, VEC]" in loop
    assert "[:, None]" not in loop.split("mask = ", 1)[1]  # no row-wide reduction in the loop
    assert branch.count("tl.reduce((") == 1
    # the launcher's VEC: one 16-byte load's elements, 1 where LANES holds fewer
    assert heuristics.looped_vec(4096, 2) == 8 and heuristics.looped_vec(4096, 4) == 4
    assert heuristics.looped_vec(4, 2) == 1


@pytest.mark.gpu
def test_fold_after_an_early_launch_sees_every_row_on_the_gpu(monkeypatch) -> None:
    # On sm_90+ the fold launches while the main grid runs (PDL); a fold that took a word
    # before this call stamped it would read the last call's value (the words are kept). fp32
    # logits, so the loss is fp32 too: a row of 4096 missed or stale moves the mean by its
    # difference / 4096 (~3e-5 of it), above the 1e-5 tolerance. Also: an interrupted call
    # (main grid run, fold not) before each trial, and the same call captured in a CUDA graph
    # and replayed on new data.
    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or newer")
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # this file interprets; Triton reads it to compile
    dev = torch.device("cuda")
    x = torch.randn(4096, 8192, device=dev) * 4
    t = torch.randint(0, 8192, (4096,), device=dev)
    op = generate(cross_entropy, (x.cpu()[:8], t.cpu()[:8]), name="cross_entropy_pdl_gpu")
    mod = load_generated_module(op.triton_module_source(), "cross_entropy_pdl_gpu",
                                interpret=False)
    assert mod._pdl(dev) is True
    cfg = {"strategy": "looped", "ROWS": 1, "BLOCK_N": 4096, "num_warps": 4}
    for trial in range(20):
        x.normal_().mul_(4)
        t.random_(0, 8192)
        want = F.cross_entropy(x.double(), t)
        if trial % 2:
            _interrupted_call(mod, x.flip(0), t, cfg)
        got = mod.launch(x, t, config=cfg)
        assert abs(got.item() - want.item()) <= 1e-5 * abs(want.item()), trial
    out = torch.empty((), device=dev)
    mod.launch(x, t, out=out, config=cfg)  # compiled before the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        mod.launch(x, t, out=out, config=cfg)
    for trial in range(5):
        x.normal_().mul_(4)
        t.random_(0, 8192)
        graph.replay()
        want = F.cross_entropy(x.double(), t)
        assert abs(out.item() - want.item()) <= 1e-5 * abs(want.item()), trial


def _interrupted_call(mod: Any, x: torch.Tensor, t: torch.Tensor, cfg: dict[str, Any]) -> None:
    """What a call interrupted between its two launches leaves: its main grid's words, stamped
    with its own epoch, and no fold. The launcher's kernel launch, with the fold's left out."""
    real = mod._cross_entropy_pdl_gpu_post_kernel
    mod._cross_entropy_pdl_gpu_post_kernel = {(1,): lambda *a, **k: None}
    try:
        mod.launch(x, t, config=cfg)
    finally:
        mod._cross_entropy_pdl_gpu_post_kernel = real


@pytest.mark.parametrize(("dim", "keepdim", "kind"), [
    (1, False, "sum"), (0, True, "mean"), (2, False, "amax"), (1, True, "amin"),
], ids=["sum_dim1", "mean_dim0_keepdim", "amax_last", "amin_dim1_keepdim"])
def test_reduce_over_any_dim(dim: int, keepdim: bool, kind: str) -> None:
    def reduce(x):
        return getattr(torch, kind)(x, dim=dim, keepdim=keepdim)

    check(reduce, (rand(3, 5, 40),), f"reduce_{kind}_{dim}", torch.float32)


def test_softmax_over_non_last_dim() -> None:
    def softmax_dim1(x):
        return torch.softmax(x, dim=1)

    check(softmax_dim1, (rand(3, 5, 40),), "softmax_dim1", torch.float32)


def test_full_sum_becomes_rows_then_post() -> None:
    def total(x):
        return x.sum() * 0.5

    op = check(total, (rand(7, 33),), "total", torch.float32)
    assert op.fusion.kernels == 2


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm_plain, cross_entropy],
                         ids=["softmax_online", "log_softmax_online", "layernorm", "ce"])
def test_looped_strategy_forced_on_small_row(fn: Callable[..., Any]) -> None:
    x = rand(7, 33)
    args: tuple[Any, ...] = (x,)
    if fn is cross_entropy:
        args = (x, torch.randint(0, 33, (7,), generator=torch.Generator().manual_seed(1)))
    cfg = {"strategy": "looped", "ROWS": 1, "BLOCK_N": 8, "num_warps": 1}
    op = check(fn, args, f"{fn.__name__}_looped", torch.float32, config=cfg)
    if fn is softmax:
        assert "m_new" in op.triton_module_source()  # max and sum(exp) share one online pass


@pytest.mark.parametrize("lanes", [None, 4, 16], ids=["launcher_lanes", "lanes4", "lanes16"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_looped_online_softmax_runs_per_lane_and_stays_right(lanes, dtype) -> None:
    # The looped kernel keeps a running (max, sum of exp) per lane position of a [ROWS,
    # BLOCK_N / LANES, LANES] view of each chunk (NOTES item 39). Lanes that see only -inf
    # for a while (masked vocabulary) must not turn NaN, and the result must not depend on
    # LANES (the launcher's default from the warps and dtype, or a config's own).
    x = rand(6, 70, dtype=dtype)
    x[1, :20] = float("-inf")  # whole lanes -inf in the first chunks
    x[2, 40:] = float("-inf")  # and in the last ones
    x[4, ::3] = float("-inf")
    target = torch.tensor([5, 30, 10, 0, 1, 69])  # no target on a -inf logit
    cfg = {"strategy": "looped", "ROWS": 2, "BLOCK_N": 16, "num_warps": 1,
           **({"LANES": lanes} if lanes else {})}
    for fn, args in ((softmax, (x,)), (log_softmax, (x,)), (cross_entropy, (x, target))):
        op = check(fn, args, f"{fn.__name__}_lanes_{lanes}", dtype, config=cfg)
    src = op.triton_module_source()
    body = src[src.index("_looped_kernel("):src.index("_persistent_kernel(")]
    loop = body[body.index("for start in range"):body.index("red", body.index("for start"))]
    # within the chunk loop only per-thread reductions along the view's axis 1: no row-wide
    # tl.max(..., axis=1)[:, None] and no tl.sum(..., axis=1)[:, None] (a barrier each)
    assert "tl.max(g, axis=1))" in loop and "[:, None]" not in loop.split("tl.reshape")[1]
    assert op.kernel_refs(args, cfg)[0].constexprs["LANES"] == (
        lanes or heuristics.looped_lanes(16, 1, x.element_size()))
    with pytest.raises(ValueError, match="looped needs LANES dividing BLOCK_N 16, got 3"):
        run_generated(cross_entropy, args, "ce_lanes_bad", {**cfg, "LANES": 3})


@pytest.mark.parametrize("strategy", ["single_pass", "persistent"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_one_block_online_softmax_pairs_each_threads_max_and_sum(strategy, dtype) -> None:
    # The single pass and the persistent kernel take each thread's max and sum of exp over its
    # own elements, then combine the threads' (max, sum) pairs across the block once (NOTES
    # item 47). Threads that hold only -inf or only padding (70 columns in a 128 block, 4
    # elements a thread) must not turn NaN; rows whose exps underflow in most threads (x * 60)
    # must keep their sum; a masked row (7 rows in blocks of 2) stays unwritten.
    x = rand(7, 70, dtype=dtype) * 2.0
    x[1, :40] = float("-inf")  # whole threads -inf
    x[2, ::3] = float("-inf")
    x[5] = x[5] * 30.0
    target = torch.tensor([5, 60, 10, 0, 1, 69, 33])  # no target on a -inf logit
    cfg = {"strategy": strategy, "ROWS": 2, "BLOCK_N": 128, "num_warps": 1,
           **({"num_stages": 2} if strategy == "persistent" else {})}
    for fn, args in ((softmax, (x,)), (log_softmax, (x,)), (cross_entropy, (x, target))):
        op = check(fn, args, f"{fn.__name__}_pairs_{strategy}", dtype, config=cfg, use_out=True)
        src = op.triton_module_source()
        kernel = src[src.index(f"_{strategy}_kernel("):]
        kernel = kernel[:kernel.index("\n\n\n")]
        # one reduction across the block (in each branch of a HOIST kernel: cross-entropy's);
        # no row-wide tl.max(..., axis=1)[:, None] before it
        branches = 2 if "if HOIST:" in kernel else 1
        assert kernel.count("_max_sum_exp)") == branches, fn
        assert "axis=1)[:, None]" not in kernel, fn
        # rows of 70 are not 16-byte aligned: one element a thread at a time (VEC 1)
        lanes = heuristics.looped_lanes(128, 1, x.element_size())
        consts = op.kernel_refs(args, cfg)[0].constexprs
        assert (consts["LANES"], consts["VEC"]) == (lanes // (16 // x.element_size()), 1)
    # rows of 128: aligned, 16 bytes a thread at a time
    x128 = rand(5, 128, dtype=dtype) * 4.0
    x128[3, 64:] = float("-inf")
    op = check(softmax, (x128,), f"softmax_pairs_{strategy}_128", dtype, config=cfg, use_out=True)
    consts = op.kernel_refs((x128,), cfg)[0].constexprs
    assert (consts["LANES"], consts["VEC"]) == (lanes, 16 // x.element_size())
    with pytest.raises(ValueError, match=f"{strategy} needs LANES dividing BLOCK_N 128, got 3"):
        run_generated(softmax, (x,), "softmax_pairs_bad", {**cfg, "LANES": 3})


@pytest.mark.parametrize("fn", [layernorm, softmax, add_rmsnorm, cross_entropy],
                         ids=["layernorm", "softmax", "add_rmsnorm_two_outputs", "ce_fold"])
def test_persistent_strategy_walks_every_row_block(fn: Callable[..., Any]) -> None:
    # 23 rows in blocks of 2 = 12 blocks over the interpreter's 4 programs: each program walks
    # three blocks and the last block is half full; a skipped or repeated block shows in `out`,
    # which starts as NaN.
    x = rand(23, 37)
    target = torch.randint(0, 37, (23,), generator=torch.Generator().manual_seed(1))
    args: tuple[Any, ...] = {layernorm: (x, rand(37, seed=1), rand(37, seed=2)),
                             add_rmsnorm: (x, rand(23, 37, seed=1), rand(37, seed=2)),
                             cross_entropy: (x, target)}.get(fn, (x,))
    cfg = {"strategy": "persistent", "ROWS": 2, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2,
           "PROGRAMS_PER_SM": 2}
    check(fn, args, f"{fn.__name__}_persistent", torch.float32, config=cfg, use_out=True)
    with pytest.raises(ValueError, match="persistent needs BLOCK_N >= 37"):
        run_generated(fn, args, f"{fn.__name__}_persistent_short", {**cfg, "BLOCK_N": 32})


def test_multi_row_strategy() -> None:
    cfg = {"strategy": "single_pass", "ROWS": 4, "BLOCK_N": 64, "num_warps": 2}
    check(rmsnorm, (rand(7, 33), rand(33)), "rmsnorm_rows", torch.float32, config=cfg)


def test_single_pass_refuses_a_block_shorter_than_the_row() -> None:
    op = generate(softmax, (rand(7, 33),), name="softmax_bad_cfg")
    mod = load_generated_module(op.triton_module_source(), "softmax_bad_cfg", interpret=True)
    with pytest.raises(ValueError, match="BLOCK_N"):
        mod.launch(rand(7, 33), config={"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 16,
                                        "num_warps": 1})


# ---- matmul ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=DT_IDS)
def test_linear_bias_gelu(dtype: torch.dtype) -> None:
    x, w, b = rand(33, 29, dtype=dtype), rand(47, 29, dtype=dtype, seed=1), rand(47, dtype=dtype)
    cfg = {"strategy": "tiled", "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2,
           "num_warps": 1, "num_stages": 1}
    atol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 6e-2}[dtype]
    op, got = run_generated(linear_gelu, (x, w, b), "linear_gelu", cfg)
    ref = _ref64(linear_gelu, (x, w, b))[0]
    assert (got[0].double() - ref).abs().max().item() < atol * max(1.0, ref.abs().max().item())
    assert op.family == "matmul_epilogue"
    assert torch_math_calls(op.triton_module_source()) == []


def test_matmul_residual_epilogue_default_config() -> None:
    check(mm_residual, (rand(33, 29), rand(29, 47, seed=1), rand(33, 47, seed=2)), "mm_res",
          torch.float32)


# ---- errors ---------------------------------------------------------------------------------
def test_fft_is_unsupported_and_named() -> None:
    def fft(x):
        return torch.fft.fft(x).real

    with pytest.raises(UnsupportedOpError) as err:
        generate(fft, (rand(8, 16),), name="fft")
    assert "fft" in str(err.value)


def test_conv_is_unsupported_and_named() -> None:
    def conv(x, w):
        return F.conv1d(x, w)

    with pytest.raises(UnsupportedOpError) as err:
        generate(conv, (rand(2, 3, 16), rand(4, 3, 3)), name="conv")
    assert "convolution" in err.value.op


def test_softmax_divides_by_a_per_row_reciprocal() -> None:
    # The denominator sum(exp(x - max)) is in [1, n]: one IEEE reciprocal per row, then a
    # multiply per element; other divisions stay IEEE divisions (div_rn) per element.
    x = rand(9, 70) * 30.0
    op = check(softmax, (x,), "softmax_recip", torch.float32)
    src = op.triton_module_source()
    single = src[src.index("_single_pass_kernel("):src.index("_looped_kernel(")]
    assert "tl.math.div_rn(tl.cast(1.0, tl.float32)" in single
    assert single.count("div_rn") == 1

    def ratio(a):
        return a / (a.abs() + 0.5).sum(dim=-1, keepdim=True)

    other = check(ratio, (rand(9, 70),), "ratio", torch.float32)
    body = other.triton_module_source()
    assert "inv" not in body[body.index("_single_pass_kernel("):body.index("_looped_kernel(")]


def test_unknown_strategy_is_named() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'split'"):
        run_generated(softmax, (rand(3, 8),), "softmax_bad_strategy",
                      {"strategy": "split", "ROWS": 1, "BLOCK_N": 8, "num_warps": 1})


def _single_pass(op: GeneratedOp) -> str:
    src = op.triton_module_source()
    return src[src.index("_single_pass_kernel("):src.index("_looped_kernel(")]


def test_masked_lanes_load_the_reductions_identity() -> None:
    # Softmax loads -inf into masked lanes: the max needs no select, and exp(-inf - max) = 0
    # gives the sum its identity too. Checked on 5 rows of 70 in a [4, 128] tile (masked rows
    # and columns), into a NaN-poisoned out.
    x = rand(5, 70) * 30.0
    cfg = {"strategy": "single_pass", "ROWS": 4, "BLOCK_N": 128, "num_warps": 1}
    op = check(softmax, (x,), "softmax_fill", torch.float32, config=cfg, use_out=True)
    single = _single_pass(op)
    assert "other=float('-inf')" in single
    assert "tl.where(mask" not in single

    def spread(a):  # a min: +inf in the masked lanes
        return a - torch.amin(a, dim=-1, keepdim=True)

    op = check(spread, (x,), "spread_fill", torch.float32, config=cfg, use_out=True)
    assert "other=float('inf')" in _single_pass(op)
    assert "tl.where(mask" not in _single_pass(op)


def test_masked_lanes_keep_a_select_where_the_fill_is_not_the_identity() -> None:
    # layernorm: (0 - mean)^2 is not 0 in a masked lane, so the variance's sum keeps its select.
    x, w, b = rand(5, 70), rand(70), rand(70)
    cfg = {"strategy": "single_pass", "ROWS": 4, "BLOCK_N": 128, "num_warps": 1}
    op = check(layernorm, (x, w, b), "layernorm_fill", torch.float32, config=cfg, use_out=True)
    assert "tl.where(mask" in _single_pass(op)

    def max_plus_energy(a):  # -inf would suit the max, 0 the sum of squares: one select either way
        return torch.amax(a, dim=-1, keepdim=True) + (a * a).sum(dim=-1, keepdim=True)

    op = check(max_plus_energy, (x,), "max_energy_fill", torch.float32, config=cfg, use_out=True)
    assert _single_pass(op).count("tl.where(mask") == 1
    looped = {"strategy": "looped", "ROWS": 2, "BLOCK_N": 32, "num_warps": 1}
    check(max_plus_energy, (x,), "max_energy_looped", torch.float32, config=looped, use_out=True)


@pytest.mark.parametrize("fn", [rmsnorm, layernorm, cross_entropy, add_rmsnorm])
def test_hoisted_single_pass_matches_and_loads_first(fn) -> None:
    x = rand(5, 70) * 3.0
    t = torch.tensor([3, -100, 69, 0, 12])  # one ignored target: masked gather lanes
    inputs = {rmsnorm: (x, rand(70)), layernorm: (x, rand(70), rand(70)),
              cross_entropy: (x, t), add_rmsnorm: (x, rand(5, 70, seed=1), rand(70))}[fn]
    cfg = {"strategy": "single_pass", "ROWS": 4, "BLOCK_N": 128, "num_warps": 1, "HOIST": True}
    op = check(fn, inputs, f"{fn.__name__}_hoist", torch.float32, config=cfg, use_out=True)
    single = _single_pass(op)
    hoisted = single[single.index("if HOIST:"):single.index("    else:")]
    first_reduction = min(hoisted.index(f"tl.{k}(") for k in ("sum", "max", "reduce")
                          if f"tl.{k}(" in hoisted)
    # every load of the hoisted branch comes before its first reduction
    assert hoisted.rfind("tl.load(") < first_reduction


def test_persistent_kernel_loads_weights_once_per_program() -> None:
    # The weight and bias need no row: the persistent kernel loads them before its row loop
    # (masked by the columns alone), and only x inside it.
    x, w, b = rand(23, 37), rand(37, seed=1), rand(37, seed=2)
    cfg = {"strategy": "persistent", "ROWS": 2, "BLOCK_N": 64, "num_warps": 2, "num_stages": 2,
           "PROGRAMS_PER_SM": 2}
    op = check(layernorm, (x, w, b), "layernorm_pre", torch.float32, config=cfg, use_out=True)
    src = op.triton_module_source()
    kernel = src[src.index("_persistent_kernel("):]
    before_loop, loop = kernel.split("for block in tl.range(", 1)
    assert before_loop.count("tl.load(") == 2 and before_loop.count("mask=col_mask") == 2
    loop = loop[:loop.index("\n\n\n")]
    # x, and in the VAR1 branch the row's first element (its shift)
    var1 = "\n".join(_var1_branches(loop))
    assert loop.count("tl.load(") - var1.count("tl.load(") == 1 and var1.count("tl.load(") == 1


def _var1_branches(kernel: str) -> list[str]:
    """The lines under each `if VAR1:` of a kernel, up to its `else:`."""
    branches, lines = [], kernel.splitlines()
    for i, ln in enumerate(lines):
        if ln.strip() == "if VAR1:":
            indent = ln[:len(ln) - len(ln.lstrip())]
            end = next(j for j in range(i + 1, len(lines)) if lines[j] == indent + "else:")
            branches.append("\n".join(lines[i + 1:end]))
    return branches


@pytest.mark.parametrize("fn", [softmax, log_softmax, layernorm, add_rmsnorm, cross_entropy])
def test_two_block_single_pass_matches(fn) -> None:
    # 37 columns as a 32 head and an 8 tail block; 5 rows in blocks of 2 (a half-full last
    # block), into a NaN-poisoned out.
    x = rand(5, 37) * 3.0
    t = torch.tensor([3, -100, 36, 0, 12])
    inputs = {layernorm: (x, rand(37), rand(37)), add_rmsnorm: (x, rand(5, 37, seed=1), rand(37)),
              cross_entropy: (x, t)}.get(fn, (x,))
    cfg = {"strategy": "two_block", "ROWS": 2, "BLOCK_N": 32, "BLOCK_TAIL": 8, "num_warps": 1}
    op = check(fn, inputs, f"{fn.__name__}_two_block", torch.float32, config=cfg, use_out=True)
    src = op.triton_module_source()
    body = src[src.index("_two_block_kernel("):]
    assert "cols_t" in body and "mask=mask_t" in body
    with pytest.raises(ValueError, match="two_block needs BLOCK_N \\+ BLOCK_TAIL >= 37"):
        run_generated(fn, inputs, f"{fn.__name__}_two_block_short", {**cfg, "BLOCK_TAIL": 4})


@pytest.mark.parametrize("cfg", [
    {"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 64, "num_warps": 1},
    {"strategy": "looped", "ROWS": 1, "BLOCK_N": 16, "num_warps": 1},
    {"strategy": "persistent", "ROWS": 2, "BLOCK_N": 64, "num_warps": 1, "num_stages": 2,
     "PROGRAMS_PER_SM": 1},
    {"strategy": "two_block", "ROWS": 2, "BLOCK_N": 32, "BLOCK_TAIL": 32, "num_warps": 1},
], ids=["single", "looped", "persistent", "two_block"])
def test_full_blocks_run_without_masks_and_stay_right(cfg) -> None:
    # 6 rows of 64 columns: every block of rows (2) and of columns full, so EVEN drops the
    # masks; outputs poisoned with NaN, so a lane left unwritten fails.
    assert heuristics.rowwise_full_blocks(cfg["strategy"], 6, 64, cfg)
    assert not heuristics.rowwise_full_blocks(cfg["strategy"], 6, 63, cfg)
    assert not heuristics.rowwise_full_blocks(cfg["strategy"], 5, 64, {**cfg, "ROWS": 2})
    x = rand(6, 64) * 3.0
    t = torch.tensor([3, -100, 63, 0, 12, 40])
    for fn, inputs in ((softmax, (x,)), (layernorm, (x, rand(64, seed=1), rand(64, seed=2))),
                       (cross_entropy, (x, t))):
        for var1 in (False, True) if fn is layernorm else (False,):
            check(fn, inputs, f"{fn.__name__}_even", torch.float32,
                  config={**cfg, "VAR1": var1}, use_out=True)


@pytest.mark.parametrize("cfg", [
    {"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 1024, "num_warps": 1},
    {"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 1024, "num_warps": 1, "HOIST": True},
    {"strategy": "two_block", "ROWS": 2, "BLOCK_N": 512, "BLOCK_TAIL": 256, "num_warps": 1},
    {"strategy": "persistent", "ROWS": 2, "BLOCK_N": 1024, "num_warps": 1, "num_stages": 2,
     "PROGRAMS_PER_SM": 1},
    {"strategy": "looped", "ROWS": 1, "BLOCK_N": 256, "num_warps": 1},
], ids=["single", "single-hoist", "two_block", "persistent", "looped"])
def test_layernorm_variance_in_one_round_stays_right_where_sum_of_squares_fails(cfg) -> None:
    cfg = {**cfg, "VAR1": True}
    # Rows whose mean (1e3) dwarfs their spread (1), fp32: sum(x^2) / n - mean^2 cancels all
    # but a digit there, and the shift by the row's first element keeps the fp32 tolerance.
    # (At 1e4 the fp32 mean itself rounds by 5e-4 of the spread: no fp32 kernel keeps 1e-4.)
    # Row 1 starts with an outlier (the shift's worst case: the error grows with
    # (mean - k)^2 / var, here ~600).
    x = rand(5, 700) + 1.0e3
    x[1, 0] = 1.0e3 + 60.0
    w, b = rand(700, seed=1), rand(700, seed=2)
    op = check(layernorm, (x, w, b), f"layernorm_1round_{cfg['strategy']}", torch.float32,
               config=cfg, use_out=True)
    src = op.triton_module_source()
    kernel = src[src.index(f"_{cfg['strategy']}_kernel("):]
    kernel = kernel[:kernel.index("\n\n\n")]
    # one two-value reduction per block of the row (the looped kernel: of its per-thread
    # sums, after one pass over the row); a row-wide sum only under the guard
    blocks = 2 if cfg["strategy"] == "two_block" else 1
    branches = _var1_branches(kernel)
    # HOIST's two; the looped kernel's SHIFT body (rows not 16-byte aligned) and its own
    assert len(branches) == (2 if cfg["strategy"] in ("single_pass", "looped") else 1)
    for n, branch in enumerate(branches):
        assert branch.count("tl.reduce((") == blocks
        lines = branch.splitlines()
        guard = next(i for i, ln in enumerate(lines) if ln.strip().startswith("if tl.max(("))
        indent = len(lines[guard]) - len(lines[guard].lstrip())
        assert all(i > guard and len(ln) - len(ln.lstrip()) > indent
                   for i, ln in enumerate(lines) if "tl.sum(" in ln and "[:, None]" in ln)
        # the looped kernel: one pass over the row, and one more under the guard (the SHIFT
        # body's first: each pass a loop over the row's first, inner and last blocks)
        loops = (6 if n == 0 else 2) if cfg["strategy"] == "looped" else 0
        assert branch.count("for start in range(") == loops
    # Without the shift (k = 0) and without the exact second round for a far-out k, the same
    # kernel fails the check: these rows do cancel.
    k_line = next(ln for ln in kernel.splitlines() if ln.strip().startswith("k"))
    guard = next(ln for ln in kernel.splitlines() if ln.strip().startswith("if tl.max(("))
    bare = src.replace(k_line, k_line + " * 0.0").replace(guard, guard.split("if")[0] + "if False:")
    assert "if False:" in bare
    mod = load_generated_module(bare, f"layernorm_bare_{cfg['strategy']}", interpret=True)
    got = (mod.launch(x, w, b, config=cfg),)
    with pytest.raises(pytest.fail.Exception):
        assert_close(got, _ref64(layernorm, (x, w, b)), torch.float32)
