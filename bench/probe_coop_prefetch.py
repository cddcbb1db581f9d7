"""Probe (one-off, issue 31): does split_coop softmax at vocabulary widths gain from loading the
next row's chunk before the row barrier, so that the load overlaps the wait?

    python -m bench.probe_coop_prefetch [--reps 30]

Hand-written Triton split_coop softmax (one chunk of a row per program, its values kept in
registers across a per-row barrier; the generated kernel's form, `rowwise.coop`), with
PREFETCH 0 (as generated) or 1 (the next row's chunk loaded after the partials are stored,
before the spin on the row's counter), and STAGES 2: the row loop as `tl.range(...,
num_stages=2)`, Triton's own software pipelining. Rows are 16-byte aligned (widths a multiple
of 8).
Timed beside eager softmax and a copy of as many bytes, L2 flushed, medians of --reps
(harness.timing.compare); each config checked against float64 on 8 rows first.
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _max_sum_exp(m_a, s_a, m_b, s_b):
    d = tl.where(m_a == m_b, 0.0, tl.abs(m_a - m_b))
    e = tl.exp2(-d * 1.4426950408889634)
    return tl.maximum(m_a, m_b), tl.where(m_a >= m_b, s_a + s_b * e, s_a * e + s_b)


@triton.jit
def _coop_softmax(x_ptr, y_ptr, stride, n_rows, n_cols, ws_ptr, cnt_ptr, n_chunks,
                  BLOCK_N: tl.constexpr, LANES: tl.constexpr, VEC: tl.constexpr,
                  SPLIT: tl.constexpr, PREFETCH: tl.constexpr, STAGES: tl.constexpr):
    chunk = tl.program_id(0) % n_chunks
    n_groups = tl.num_programs(0) // n_chunks
    lo = chunk * BLOCK_N
    cols = lo + tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    first = tl.program_id(0) // n_chunks
    x_next = tl.load(x_ptr + first.to(tl.int64) * stride + cols, mask=mask & (first < n_rows),
                     other=float("-inf"))
    for row in tl.range(first, n_rows, n_groups, num_stages=STAGES):
        r64 = row.to(tl.int64)
        if PREFETCH:
            x = x_next.to(tl.float32)
        else:
            x = tl.load(x_ptr + r64 * stride + cols, mask=mask, other=float("-inf")).to(tl.float32)
        g = tl.reshape(x, [BLOCK_N // LANES, LANES // VEC, VEC])
        m_t = tl.max(tl.max(g, axis=2), axis=0)
        shift_t = tl.where(m_t > float("-inf"), m_t, 0.0)
        p = tl.exp2((g - shift_t[None, :, None]) * 1.4426950408889634)
        m_c, s_c = tl.reduce((m_t, tl.sum(tl.sum(p, axis=2), axis=0)), 0, _max_sum_exp)
        tl.store(ws_ptr + (r64 * n_chunks + chunk) * 2 + 0, m_c)
        tl.store(ws_ptr + (r64 * n_chunks + chunk) * 2 + 1, s_c)
        tl.debug_barrier()
        tl.atomic_add(cnt_ptr + row, 1, sem="release", scope="gpu")
        if PREFETCH:
            nxt = row + n_groups
            x_next = tl.load(x_ptr + nxt.to(tl.int64) * stride + cols,
                             mask=mask & (nxt < n_rows), other=float("-inf"))
        while tl.atomic_add(cnt_ptr + row, 0, sem="acquire", scope="gpu") < n_chunks:
            pass
        tl.debug_barrier()
        parts = tl.arange(0, SPLIT)
        pmask = parts < n_chunks
        pm = tl.load(ws_ptr + (r64 * n_chunks + parts) * 2 + 0, mask=pmask, other=float("-inf"),
                     cache_modifier=".cg")
        ps = tl.load(ws_ptr + (r64 * n_chunks + parts) * 2 + 1, mask=pmask, other=0.0,
                     cache_modifier=".cg")
        m = tl.max(pm, axis=0)
        s = tl.sum(ps * tl.exp2((pm - m) * 1.4426950408889634), axis=0)
        scale = tl.where(m_t > float("-inf"), tl.exp2((shift_t - m) * 1.4426950408889634), 0.0)
        y = tl.reshape(p * (scale / s)[None, :, None], [BLOCK_N])
        tl.store(y_ptr + r64 * stride + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def coop_softmax(x: torch.Tensor, block: int, warps: int, per_sm: int, prefetch: bool,
                 stages: int = 1) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    n_chunks = triton.cdiv(n_cols, block)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    n_groups = min(n_rows, sms * per_sm // n_chunks)
    if n_groups == 0:
        raise ValueError("a row's chunks do not fit at once")
    ws = torch.empty(n_rows * n_chunks * 2, dtype=torch.float32, device=x.device)
    cnt = torch.zeros(n_rows, dtype=torch.int32, device=x.device)
    vec = 16 // x.element_size()
    lanes = min(block, warps * 32 * vec)
    _coop_softmax[(n_groups * n_chunks,)](
        x, y, x.stride(0), n_rows, n_cols, ws, cnt, n_chunks, BLOCK_N=block, LANES=lanes,
        VEC=vec, SPLIT=max(1, 1 << (n_chunks - 1).bit_length()), PREFETCH=int(prefetch),
        STAGES=stages, num_warps=warps, num_stages=1, launch_cooperative_grid=True)
    return y


def main(argv: list[str] | None = None) -> None:
    import hwmodels
    from harness.env_info import versions
    from harness.timing import compare

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    hw = hwmodels.detect().model
    copy_gbps = hw.measured_value("copy_bandwidth_gbps")
    print({"device": torch.cuda.get_device_name(), **versions()})
    cases = [((4096, 128256), torch.bfloat16), ((4096, 151936), torch.float32)]
    tiles = {torch.bfloat16: [(16384, 8, 2), (8192, 4, 4), (8192, 8, 2)],
             torch.float32: [(8192, 4, 4), (8192, 4, 2), (8192, 8, 2)]}
    for shape, dt in cases:
        x = torch.randn(shape, device="cuda", dtype=dt) * 4
        ref = torch.softmax(x[:8].double(), dim=-1)
        fns = {}
        for block, warps, per_sm in tiles[dt]:
            for pf, st in ((False, 1), (True, 1), (False, 2)):
                name = (f"{block}x{warps}x{per_sm}{' prefetch' if pf else ''}"
                        f"{' stages2' if st > 1 else ''}")
                try:
                    y = coop_softmax(x, block, warps, per_sm, pf, st)
                    torch.cuda.synchronize()
                    err = ((y[:8].double() - ref).abs().max() / ref.abs().max()).item()
                except Exception as exc:  # noqa: BLE001 - a probe lists what failed
                    print(f"  {shape} {dt} {name}: FAILED {type(exc).__name__}: {exc}")
                    continue
                if err > 2e-2:
                    print(f"  {shape} {dt} {name}: WRONG (rel err {err:.2e})")
                    continue
                fns[name] = (lambda b, w, p, f, s: lambda t: coop_softmax(t, b, w, p, f, s))(
                    block, warps, per_sm, pf, st)
        fns["eager"] = lambda t: torch.softmax(t, dim=-1)
        fns["copy"] = lambda t: t.clone()
        cmp = compare(fns, lambda _x=x: (_x,), hw=hw, reps=args.reps, warmup=3, graph=False)
        nbytes = 2 * x.numel() * x.element_size()
        print(f"{shape} {dt}")
        for name, t in sorted(cmp.timings.items(), key=lambda kv: kv[1].median_ms):
            gbps = nbytes / (t.median_ms * 1e-3) / 1e9
            print(f"  {name:24s} {t.median_ms * 1e3:8.1f} us  {gbps / copy_gbps * 100:5.1f}% "
                  f"of copy  {cmp.timings['eager'].median_ms / t.median_ms:5.2f}x eager")


if __name__ == "__main__":
    main()
