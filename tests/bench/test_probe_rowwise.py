"""bench/probe_rowwise.py: its source transforms still compute the op (run on the CPU)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import torch

from bench.probe_rowwise import transform
from bench.sweep import generated
from porter.codegen import load_generated_module


def _run(op: str, src: str, name: str, shape: tuple[int, ...], cfg: dict) -> None:
    spec, _ = generated(op)
    module = load_generated_module(src, name, interpret=True)
    gen = torch.Generator().manual_seed(5)
    inputs = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
    got = module.launch(*inputs, config=cfg)
    want = spec.reference(*[x.double() if x.is_floating_point() else x for x in inputs])
    torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=1e-5)


def test_ffma_stays_right() -> None:
    for op in ("softmax", "cross_entropy"):
        _, gen_op = generated(op)
        src = transform(gen_op.triton_module_source(), "ffma")
        assert "tl.where(mask & safe" not in src and f"* {1.4426950408889634} -" in src, op
        for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 128, "num_warps": 1},
                    {"strategy": "looped", "ROWS": 2, "BLOCK_N": 32, "num_warps": 1}):
            _run(op, src, f"probe_ffma_{op}", (5, 70), cfg)


def test_masked_keeps_every_mask_and_stays_right() -> None:
    _, gen_op = generated("softmax")
    base = gen_op.triton_module_source()
    src = transform(base, "masked")
    assert base.count(" | EVEN") >= 5 and " | EVEN" not in src
    # full rows and row blocks (EVEN true in base), so only the masks differ
    for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 64, "num_warps": 1},
                {"strategy": "looped", "ROWS": 1, "BLOCK_N": 32, "num_warps": 1}):
        _run("softmax", src, "probe_masked", (4, 64), cfg)


def test_diag_noexp_drops_the_exp_and_is_wrong() -> None:
    _, gen_op = generated("cross_entropy")
    base = gen_op.triton_module_source()
    src = transform(base, "diag_noexp")
    assert src != base and "p = g - m_shift[:, None, :]" in src
    try:
        _run("cross_entropy", src, "probe_noexp", (5, 70),
             {"strategy": "looped", "ROWS": 1, "BLOCK_N": 32, "num_warps": 1})
    except AssertionError:
        return
    raise AssertionError("diag_noexp computed the loss right: it does not drop the exp")


def test_piped_stays_right() -> None:
    for op in ("softmax", "cross_entropy", "layernorm"):
        _, gen_op = generated(op)
        base = gen_op.triton_module_source()
        src = transform(base, "piped")
        assert src != base, op
        _run(op, src, f"probe_piped_{op}", (5, 1023),
             {"strategy": "looped", "ROWS": 1, "BLOCK_N": 256, "num_warps": 2,
              "num_stages": 2})


def test_l1w_marks_the_looped_weight_loads_and_stays_right() -> None:
    _, gen_op = generated("layernorm")
    for which, cg in (("l1w", 0), ("l1wcg", 1)):
        src = transform(gen_op.triton_module_source(), which)
        body = src[src.index("def _layernorm_looped_kernel("):]
        body = body[:body.index("\n\n\n")]
        assert body.count('eviction_policy="evict_last"') == 2  # the weight and the bias
        assert (body.count('cache_modifier=".cg"') > 0) == bool(cg)
        for var1 in (False, True):
            _run("layernorm", src, f"probe_{which}", (5, 1023),
                 {"strategy": "looped", "ROWS": 1, "BLOCK_N": 256, "num_warps": 2,
                  "VAR1": var1})


def test_diagnostics_drop_what_they_name() -> None:
    _, ln = generated("layernorm")
    base = ln.triton_module_source()
    for which, ptr in (("diag_nob", "in2_ptr"), ("diag_now", "in1_ptr")):
        src = transform(base, which)
        for kernel in ("single_pass", "looped", "persistent"):  # not two_block's tail block
            def body(text: str, kernel: str = kernel) -> str:
                at = text.index(f"def _layernorm_{kernel}_kernel(")
                return text[at:text.index("\n\n\n", at)]
            assert f"tl.load({ptr}" in body(base) and f"tl.load({ptr}" not in body(src), which
    _, ce = generated("cross_entropy")
    base = ce.triton_module_source()
    assert "_post_kernel[(1,)](" not in transform(base, "diag_nofold")
    # gridwait: the fold waits for the main grid's end on every early launch, as before it
    # polled its words (the launcher sets GRID_WAIT under CUDA-graph capture only)
    assert "GRID_WAIT=captured and pdl," in base
    assert "GRID_WAIT=pdl," in transform(base, "gridwait")
    assert '"BLOCK": 512, "num_warps": 4}' in transform(base, "foldb512")


def test_spinlast_waits_on_the_last_word_and_stays_right() -> None:
    spec, gen_op = generated("cross_entropy")
    src = transform(gen_op.triton_module_source(), "spinlast")
    assert "last = tl.load(words_ptr + 1 * n_rows + n_rows - 1, mask=n_rows > 0" in src
    module = load_generated_module(src, "probe_spinlast", interpret=True)
    for strategy, block in (("looped", 256), ("single_pass", 1024)):
        inputs = spec.make_inputs((37, 1023), torch.float32, torch.device("cpu"),
                                  torch.Generator().manual_seed(block))
        inputs[1][3] = -100
        got = module.launch(*inputs, config={"strategy": strategy, "ROWS": 1, "BLOCK_N": block,
                                             "num_warps": 2})
        want = spec.reference(*[x.double() if x.is_floating_point() else x for x in inputs])
        torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=1e-5)


def test_wbloop_loads_weights_in_the_row_loop_and_stays_right() -> None:
    _, gen_op = generated("layernorm")
    src = transform(gen_op.triton_module_source(), "wbloop")
    body = src[src.index("def _layernorm_persistent_kernel("):]
    body = body[:body.index("\n\n\n")]
    loop = body[body.index("for block in"):]
    assert loop.count("tl.load(in1_ptr") == 1 and loop.count("tl.load(in2_ptr") == 1
    _run("layernorm", src, "probe_wbloop", (9, 1537),
         {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 2048, "num_warps": 4,
          "num_stages": 2, "VAR1": True})


def test_lhoist_moves_the_target_loads_before_the_loop_and_stays_right() -> None:
    _, gen_op = generated("cross_entropy")
    src = transform(gen_op.triton_module_source(), "lhoist")
    body = src[src.index("def _cross_entropy_looped_kernel("):]
    body = body[:body.index("\n\n\n")]
    assert body.index("tl.load(in1_ptr") < body.index("for start in")
    _run("cross_entropy", src, "probe_lhoist", (5, 1023),
         {"strategy": "looped", "ROWS": 1, "BLOCK_N": 256, "num_warps": 2})


def test_pack16_recomputes_from_the_packed_row_and_stays_right() -> None:
    # fp32 rows take the helper's plain .to() branch, which the interpreter runs: the rewrite
    # (each use widens the row again; what derives from it is recomputed) keeps the math
    # (the softmax's form rewrote its two-round kernel of before item 47: git 5076ea0)
    for op in ("layernorm", "rmsnorm"):
        _, gen_op = generated(op)
        src = transform(gen_op.triton_module_source(), "pack16")
        body = src[src.index(f"def _{op}_single_pass_kernel("):]
        body = body[:body.index("\n\n\n")]
        assert "x1_h = tl.load(" in body and not re.search(r"\bx1\b", body), op
        for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 2048, "num_warps": 2},
                    {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 2048, "num_warps": 2,
                     "num_stages": 2}):
            extra = [{"VAR1": False}, {"VAR1": True}] if op == "layernorm" else [{}]
            for more in extra:
                _run(op, src, f"probe_pack16_{op}", (5, 1537), {**cfg, **more})


def test_pack16_widens_bf16_at_each_use_in_the_compiled_kernel() -> None:
    # the interpreter cannot run inline asm: cross-compile for sm_90 and read the PTX. One
    # widening per use of the row (twice in its sum of squares, once in the output) shows that
    # LLVM neither hoisted it to the load nor merged the uses.
    import hwmodels
    import targets
    from targets.base import LaunchConfig

    hw = hwmodels.get("h100")
    spec, gen_op = generated("rmsnorm")
    src = transform(gen_op.triton_module_source(), "pack16")
    cfg = {"strategy": "single_pass", "ROWS": 1, "BLOCK_N": 1024, "num_warps": 4}
    inputs = tuple(spec.make_inputs((64, 1024), torch.bfloat16, torch.device("meta"),
                                    torch.Generator().manual_seed(0)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rmsnorm_pack16.py"
        path.write_text(src)
        (ref,) = [r for r in gen_op.kernel_refs(inputs, cfg, source_path=str(path))
                  if r.name.endswith("_single_pass_kernel")]
        rep = targets.for_device(hw).compile(ref, LaunchConfig(4, 1, {}), hw)
    ptx = rep.artifacts["ptx"]
    # 1024 values over 128 threads: 8 a thread, 4 packed pairs, widened at 3 uses
    assert ptx.count("shl.b32") >= 3 * 4 and ptx.count("and.b32 %r") >= 3 * 4, ptx[:2000]



def test_tworound_restores_the_two_block_wide_reductions_and_stays_right() -> None:
    for op in ("softmax", "cross_entropy"):
        _, gen_op = generated(op)
        src = transform(gen_op.triton_module_source(), "tworound")
        for kernel in ("single_pass", "persistent"):
            body = src[src.index(f"def _{op}_{kernel}_kernel("):]
            body = body[:body.index("\n\n\n")].split("else:")[-1]  # past a HOIST branch
            assert "_max_sum_exp)" not in body and "tl.max(x1, axis=1)[:, None]" in body, op
        shape = (5, 70) if op == "softmax" else (5, 1023)
        for cfg in ({"strategy": "single_pass", "ROWS": 2, "BLOCK_N": 128 if op == "softmax"
                     else 1024, "num_warps": 1},
                    {"strategy": "persistent", "ROWS": 1, "BLOCK_N": 128 if op == "softmax"
                     else 1024, "num_warps": 2, "num_stages": 2}):
            _run(op, src, f"probe_tworound_{op}", shape, cfg)
