"""Probe (not product): odd-width 16-bit rows, looped kernels masked vs aligned interior."""
import json, os, sys
import torch, triton
sys.path.insert(0, os.path.dirname(__file__))
import align_kernels as K
from harness.timing import compare
import hwmodels

hw = hwmodels.get("h100")
dev = torch.device("cuda")
print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
rows_out = []


def run_case(kind, R, N, dtype):
    g = torch.Generator(device=dev).manual_seed(0)
    def make():
        x = (3.0 * torch.randn(R, N, device=dev, generator=g)).to(dtype)
        y = torch.empty_like(x) if kind == "softmax" else torch.empty(R, device=dev, dtype=torch.float32)
        return (x, y)
    x, y = make()
    ref = torch.softmax(x.double(), -1) if kind == "softmax" else torch.logsumexp(x.double(), -1)
    provs = {}
    vec = 16 // x.element_size()
    for block in (2048, 4096, 8192):
        for warps in (4, 8, 16):
            lanes = min(block, warps * 32 * vec)
            for form in ("masked", "aligned"):
                fn = getattr(K, ("sm_" if kind == "softmax" else "lse_") + form)
                extra = {"VEC": vec} if form == "aligned" else {}
                def call(x, y, fn=fn, block=block, warps=warps, lanes=lanes, extra=extra):
                    fn[(x.shape[0],)](x, y, x.stride(0), x.shape[1], BLOCK=block, LANES=lanes,
                                       num_warps=warps, **extra)
                y.fill_(float("nan"))
                call(x, y)
                torch.cuda.synchronize()
                err = ((y.double() - ref).abs().max() / ref.abs().max()).item()
                if not err < 2e-2:
                    print("WRONG", kind, form, block, warps, err, flush=True)
                    continue
                provs[f"{form}_{block}_{warps}"] = call
    if kind == "softmax":
        provs["eager"] = lambda x, y: torch.softmax(x, -1, out=y) if False else y.copy_(torch.softmax(x, -1))
        provs["eager"] = lambda x, y: torch.softmax(x, -1)
    else:
        provs["eager"] = lambda x, y: torch.logsumexp(x.float(), -1)
    provs["copy"] = lambda x, y: torch.empty_like(x).copy_(x)
    cmp = compare(provs, make, hw=hw, reps=30)
    t = {k: v.median_ms for k, v in cmp.timings.items()}
    bytes_ = x.numel() * x.element_size() * (2 if kind == "softmax" else 1)
    copy_gbs = 2 * x.numel() * x.element_size() / t["copy"] / 1e6
    print(f"\n== {kind} {R}x{N} {dtype} copy {t['copy']:.3f} ms {copy_gbs:.0f} GB/s", flush=True)
    for k in sorted(t, key=t.get):
        gbs = bytes_ / t[k] / 1e6
        print(f"  {k:22s} {t[k]*1000:9.1f} us  {gbs:6.0f} GB/s  {100*gbs/copy_gbs:5.1f}% of copy  {t['eager']/t[k]:.2f}x eager", flush=True)
        rows_out.append(dict(kind=kind, shape=[R, N], dtype=str(dtype), provider=k, ms=t[k], pct_copy=100*gbs/copy_gbs))


for kind, R, N, dt in [("softmax", 4096, 50257, torch.bfloat16), ("lse", 4096, 50257, torch.bfloat16),
                       ("softmax", 1024, 151937, torch.bfloat16), ("softmax", 8000, 9001, torch.float16),
                       ("softmax", 4096, 50264, torch.bfloat16)]:
    run_case(kind, R, N, dt)
out = os.environ.get("OUT", "/tmp")
with open(os.path.join(out, "probe_align.jsonl"), "w") as f:
    for r in rows_out:
        f.write(json.dumps(r) + "\n")
