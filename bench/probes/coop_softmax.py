"""Probe: softmax / log-softmax over vocabulary-width rows with each row split over SPLIT
co-resident programs (cooperative launch), the chunk kept in registers across a cross-program
barrier (counter per row, release/acquire atomics): one read and one write of the row."""
import statistics, sys, torch, triton, triton.language as tl
import torch.nn.functional as F

LOG2E = 1.4426950408889634

@triton.jit
def coop_kernel(x_ptr, y_ptr, part_ptr, cnt_ptr, n_rows, N, stride_x, stride_y,
                CHUNK: tl.constexpr, BLOCK: tl.constexpr, SPLIT: tl.constexpr,
                SPLIT_P2: tl.constexpr, LOG: tl.constexpr):
    pid = tl.program_id(0)
    groups = tl.num_programs(0) // SPLIT
    s = pid % SPLIT
    g = pid // SPLIT
    lane = tl.arange(0, BLOCK)
    cols = s * CHUNK + lane
    cmask = (lane < CHUNK) & (cols < N)
    offs = tl.arange(0, SPLIT_P2)
    for row in range(g, n_rows, groups):
        x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=cmask,
                    other=-float("inf")).to(tl.float32)
        m = tl.max(x, 0)
        l = tl.sum(tl.exp2((x - m) * 1.4426950408889634), 0)
        pbase = part_ptr + row.to(tl.int64) * (2 * SPLIT_P2)
        tl.atomic_xchg(pbase + s, m, sem="relaxed")
        tl.atomic_xchg(pbase + SPLIT_P2 + s, l, sem="relaxed")
        tl.atomic_add(cnt_ptr + row, 1, sem="release")
        while tl.atomic_add(cnt_ptr + row, 0, sem="acquire") < SPLIT:
            pass
        ms = tl.load(pbase + offs, mask=offs < SPLIT, other=-float("inf"), cache_modifier=".cg")
        ls = tl.load(pbase + SPLIT_P2 + offs, mask=offs < SPLIT, other=0.0, cache_modifier=".cg")
        M = tl.max(ms, 0)
        L = tl.sum(ls * tl.exp2((ms - M) * 1.4426950408889634), 0)
        if LOG:
            y = x - M - tl.log(L)
        else:
            y = tl.exp2((x - M) * 1.4426950408889634) / L
        tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=cmask)


def coop(x, block, warps, per_sm, log=False):
    R, N = x.shape
    split = triton.cdiv(N, block)
    chunk = triton.cdiv(triton.cdiv(N, split), 16) * 16
    assert chunk <= block and (split - 1) * chunk < N
    sp2 = triton.next_power_of_2(split)
    sms = torch.cuda.get_device_properties(x.device).multi_processor_count
    groups = max(1, min(R, sms * per_sm // split))
    y = torch.empty_like(x)
    part = torch.empty(R, 2 * sp2, device=x.device, dtype=torch.float32)
    cnt = torch.zeros(R, device=x.device, dtype=torch.int32)
    coop_kernel[(groups * split,)](x, y, part, cnt, R, N, x.stride(0), y.stride(0),
                                    CHUNK=chunk, BLOCK=block, SPLIT=split, SPLIT_P2=sp2, LOG=log,
                                    num_warps=warps, launch_cooperative_grid=True)
    return y


def bench(fn, reps=30):
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        cache.zero_()
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); fn(); b.record(); torch.cuda.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def main():
    copy = None
    xs = torch.randn(1 << 28, device="cuda")
    ys = torch.empty_like(xs)
    t = bench(lambda: ys.copy_(xs))
    copy = 2 * xs.numel() * 4 / t / 1e6
    del xs, ys
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {triton.__version__} copy {copy:.0f} GB/s")
    for width, dt, log in ((50257, torch.float32, False), (50257, torch.bfloat16, False),
                           (151936, torch.float32, False), (151936, torch.bfloat16, False),
                           (50257, torch.float32, True), (128256, torch.bfloat16, False)):
        if True:
            if True:
                x = torch.randn(4096, width, device="cuda", dtype=dt) * 4
                ref_fn = (lambda x: torch.log_softmax(x, -1)) if log else (lambda x: torch.softmax(x, -1))
                ref = ref_fn(x.double()[:64])
                gb = 2 * x.numel() * x.element_size() / 1e9
                res = [("eager", bench(lambda: ref_fn(x)))]
                cf = torch.compile(ref_fn)
                res.append(("compile", bench(lambda: cf(x))))
                for block in (4096, 8192, 16384):
                    for warps in (4, 8, 16):
                        if block // (warps * 32) > 64 or block // (warps * 32) < 4:
                            continue
                        for per_sm in (1, 2, 4):
                            name = f"coop b{block} w{warps} p{per_sm}"
                            try:
                                for _ in range(3):
                                    y = coop(x, block, warps, per_sm, log)
                                    err = (y[:64].double() - ref).abs().max().item()
                                    tol = 1e-4 if dt == torch.float32 else 2e-2
                                    scale = ref.abs().max().item()
                                    if not err <= tol * max(scale, 1e-30):
                                        raise RuntimeError(f"WRONG err {err:.3e}")
                                    x2 = torch.randn_like(x)
                                    y2 = coop(x2, block, warps, per_sm, log)
                                    e2 = (y2[-64:].double() - ref_fn(x2[-64:].double())).abs().max().item()
                                    if not e2 <= tol * max(ref_fn(x2[-64:].double()).abs().max().item(), 1e-30):
                                        raise RuntimeError(f"WRONG tail err {e2:.3e}")
                                res.append((name, bench(lambda: coop(x, block, warps, per_sm, log))))
                            except Exception as e:
                                print(f"  {name}: {type(e).__name__}: {str(e)[:120]}")
                res.sort(key=lambda r: r[1])
                eager = dict(res)["eager"]; comp = dict(res)["compile"]
                print(f"{'log_' if log else ''}softmax 4096x{width} {str(dt)[6:]}")
                for n, t in res[:6]:
                    print(f"  {n:24s} {t:7.3f} ms {gb / t * 1e3 / copy * 100:5.1f}% copy  x eager {eager / t:5.2f}  x compile {comp / t:5.2f}")
                del x
                torch.cuda.empty_cache()
                sys.stdout.flush()

if __name__ == "__main__":
    main()
