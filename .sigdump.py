"""Where the flattened TMA matmul's shared memory differs: the ttir signature and shared bytes
of the kernel as compiled at (7, 33, 64) (device launch, or CPU cross-compile with --cpu)."""
import re, sys, tempfile, json
from pathlib import Path
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import torch
from sweep import generated
spec, g = generated("matmul_bias_gelu")
cfg = {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
       "FLATTEN": True, "SUBTILE": True, "num_warps": 8, "num_stages": 3}
shape = (7, 33, 64)
def show(tag, ttir, shared):
    head = re.search(r"tt\.func public @\w+\((.*?)\) attributes", ttir, re.S)
    print(tag, "shared", shared)
    print(tag, "args", head.group(1) if head else ttir[:1500])
if "--cpu" in sys.argv:
    import hwmodels, targets, triton
    from targets.base import LaunchConfig
    from targets.triton_common import build_source
    hw = hwmodels.get("h100")
    inputs = tuple(spec.make_inputs(shape, torch.bfloat16, torch.device("meta"), torch.Generator().manual_seed(0)))
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "m.py"; p.write_text(g.triton_module_source())
        (ref,) = g.kernel_refs(inputs, cfg, source_path=str(p))
        from triton.backends.compiler import GPUTarget
        k = triton.compile(build_source(ref), target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
        show("cpu", k.asm["ttir"], k.metadata.shared)
else:
    from porter.codegen import load_generated_module
    m = load_generated_module(g.triton_module_source(), "sigdump", interpret=False)
    dev = torch.device("cuda")
    x = spec.make_inputs(shape, torch.bfloat16, dev, torch.Generator(dev).manual_seed(0))
    try:
        m.launch(*x, config=cfg); torch.cuda.synchronize(); print("launched")
    except Exception as exc:
        print("raised", type(exc).__name__, str(exc)[:100])
    fn = m._matmul_bias_gelu_matmul_tma_kernel
    for dev_caches in fn.device_caches.values():
        for key, k in dev_caches[0].items():
            show("gpu", k.asm["ttir"], k.metadata.shared)
