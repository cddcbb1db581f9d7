"""Probe: the generated fp32 matmul's tiled kernel as tf32x3 and exact fp32 over a tile sweep,
against cuBLAS fp32 (TF32 off), at 4096^3 and KernelBench level-2 Gemm sizes (B = W.t())."""
import statistics, sys, torch
sys.path.insert(0, ".")
from harness.tolerance import tolerance
from porter.codegen import generate
from porter.codegen.loading import load_generated_module

torch.backends.cuda.matmul.allow_tf32 = False
tol = tolerance(torch.float32)
op = generate(lambda a, b: a @ b, (torch.rand(64, 128), torch.rand(32, 128).t()), name="fp32mm")
mod = load_generated_module(op.triton_module_source(), op.name, interpret=False)
cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda")

def timed(fn, reps=15):
    fn(); torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        cache.zero_()
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        s.record(); fn(); e.record(); torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return statistics.median(ts)

TILES = [(128, 128, 32, 8, 3), (128, 128, 32, 4, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3),
         (128, 128, 64, 8, 3), (128, 128, 16, 8, 4), (64, 128, 32, 4, 4), (128, 64, 32, 4, 4),
         (64, 256, 32, 8, 3), (128, 256, 16, 8, 4), (256, 128, 16, 8, 4), (64, 64, 32, 4, 4)]
print(torch.cuda.get_device_name(), torch.__version__)
for m, n, k in ((4096, 4096, 4096), (1024, 8192, 8192), (16384, 4096, 2048), (128, 4096, 4096)):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g)
    w = torch.randn(n, k, device="cuda", generator=g)
    b = w.t()
    ref = (a.double() @ b.double())
    allowed = tol.atol + tol.rtol * ref.abs()
    flops = 2 * m * n * k
    rows = [("cublas fp32", timed(lambda: a @ b), float(((a @ b).double() - ref).abs().div(allowed).max()))]
    for form in ("tf32x3", "ieee"):
        for bm, bn, bk, wp, st in TILES:
            cfg = {"strategy": "tiled", "BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8,
                   "num_warps": wp, "num_stages": st, "ieee": form == "ieee", "tf32x3": form == "tf32x3",
                   "ACC_CHUNK": 0}
            name = f"{form} {bm}x{bn}x{bk} w{wp} s{st}"
            try:
                out = mod.launch(a, b, config=cfg)
                xt = float((out.double() - ref).abs().div(allowed).max())
                rows.append((name, timed(lambda: mod.launch(a, b, config=cfg)), xt))
            except Exception as e:
                print(f"  {name}: {type(e).__name__} {str(e)[:100]}")
    rows.sort(key=lambda r: r[1])
    cub = rows[[r[0] for r in rows].index("cublas fp32")][1]
    print(f"{m}x{n}x{k}")
    for name, t, xt in rows[:10]:
        print(f"  {name:28s} {t:8.3f} ms {flops / t / 1e9:7.1f} TFLOP/s  x cublas {cub / t:5.2f}  err/tol {xt:6.3f}")
    sys.stdout.flush()
