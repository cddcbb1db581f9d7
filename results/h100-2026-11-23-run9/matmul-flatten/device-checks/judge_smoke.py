"""The judge's smoke stage on the flattened 3-stage TMA matmul, then every compiled variant of
the kernel in the cache: which launch needed 262 KB."""
import re, sys
sys.path.insert(0, "bench"); sys.path.insert(0, ".")
import torch
import hwmodels
from harness import check
from porter.spec import load_spec
from porter.port import _refitting_candidate
from sweep import generated
from porter.codegen import load_generated_module
spec, g = generated("matmul_bias_gelu")
problem = load_spec("examples/matmul_bias_gelu/spec.py").problem()
m = load_generated_module(g.triton_module_source(), "sigdump2", interpret=False)
hw = hwmodels.detect().model
cfg = {"strategy": "tma_persistent", "BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8,
       "FLATTEN": True, "SUBTILE": True, "num_warps": 8, "num_stages": 3, "dtype": "bf16"}
cand = _refitting_candidate(m, g, hw, cfg)
rep = check(problem, cand, device="cuda", interpret=False, hw=hw, stages=["smoke"], dtypes=[torch.bfloat16])
print("passed", rep.passed, (rep.failed.message[:300] if rep.failed else ""))
fn = m._matmul_bias_gelu_matmul_tma_kernel
for caches in fn.device_caches.values():
    for key, k in caches[0].items():
        head = re.search(r"tt\.func public @\w+\((.*?)\) attributes", k.asm["ttir"], re.S).group(1)
        args = re.sub(r' loc\("[^"]*"\(#loc\)\)', "", head)
        print("shared", k.metadata.shared, "stages", k.metadata.num_stages, "|", args[-900:])
