import sys, torch
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
from sweep import generated, _max_rel_err
from porter.codegen import load_generated_module
spec, g = generated("matmul_bias_gelu")
m = load_generated_module(g.triton_module_source(), "flatcheck", interpret=False)
dev = torch.device("cuda")
base = {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
        "SUBTILE": True, "num_warps": 8}
for shape in [(4097, 1537, 4096), (1023, 1537, 4097), (300, 520, 4096), (33, 65, 128), (64, 64, 64),
              (8192, 8191, 4096)]:
    for flat, st in ((False, 4), (True, 4), (True, 3), (False, 3)):
        cfg = {**base, "FLATTEN": flat, "num_stages": st}
        try:
            x = spec.make_inputs(shape, torch.bfloat16, dev, torch.Generator(dev).manual_seed(0))
            out = torch.full((shape[0], shape[1]), float("nan"), dtype=torch.bfloat16, device=dev)
            m.launch(*x, out=out, config=cfg)
            torch.cuda.synchronize()
            want = spec.reference(*[t.double() if t.is_floating_point() else t for t in x])
            res = (round(_max_rel_err(out, want), 5), int(torch.isnan(out).sum()))
        except Exception as exc:
            res = f"{type(exc).__name__}: {str(exc)[:120]}"
        print(shape, "FLATTEN", flat, "st", st, res, flush=True)
