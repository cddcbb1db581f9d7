"""KernelBench-format files, taken unmodified: reduced sizes, lifted params, same meaning as Model.

The files under examples/kernelbench/level1 are our own problems in that format; the first
tests check that each one is a complete, self-contained problem of the format (so the rest of
the suite is not testing something that only works with porter-specific files).
"""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path
from typing import Any

import pytest
import torch

from porter.errors import SpecError
from porter.specs import load_spec
from porter.specs.kernelbench import INTERPRET_ELEMENT_BUDGET
from porter.specs.kernelbench import PARAM_SEED
from porter.specs.kernelbench import kernelbench_problem
from porter.specs.opspec import import_file

ROOT = Path(__file__).resolve().parents[2]
KB_DIR = ROOT / "examples" / "kernelbench" / "level1"
KB_FILES = sorted(KB_DIR.glob("*.py"), key=lambda p: int(p.stem.split("_", 1)[0]))
# A problem file may import only these: nothing of ours, nothing a KernelBench user lacks.
ALLOWED_IMPORTS = {"torch", "torch.nn", "torch.nn.functional", "math"}
# The full-size problems are for an 80 GB GPU: inputs must leave room for outputs and
# temporaries, and each tensor must stay indexable with 32-bit offsets.
MAX_INPUT_BYTES = 16 * 2**30
MAX_ELEMENTS_PER_TENSOR = 2**31 - 1


def test_at_least_sixteen_problem_files_numbered_one_to_n() -> None:
    assert len(KB_FILES) >= 16
    numbers = [int(p.stem.split("_", 1)[0]) for p in KB_FILES]
    assert numbers == list(range(1, len(KB_FILES) + 1))
    assert all(p.stem.split("_", 1)[1] for p in KB_FILES), "name is <n>_<Op>.py"


@pytest.mark.parametrize("path", KB_FILES, ids=lambda p: p.stem)
def test_file_is_a_self_contained_problem(path: Path) -> None:
    raw = path.read_bytes()
    assert b"\r" not in raw, "LF line endings"
    tree = ast.parse(raw.decode("utf-8"), filename=str(path))
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert "Model" in classes
    assert {"get_inputs", "get_init_inputs"} <= functions
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= ALLOWED_IMPORTS, f"{path.name} imports {sorted(imported - ALLOWED_IMPORTS)}"
    sizes = [n for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
             and isinstance(n.value.value, int)]
    assert sizes, "at least one module-level integer size global"

    # Full size, on the meta device (no memory): the model builds from get_init_inputs, the
    # inputs fit an 80 GB GPU, and forward runs on them.
    mod = import_file(path, tag="kb_selfcheck")
    init = mod.get_init_inputs()
    assert isinstance(init, list)
    model = mod.Model(*init)
    assert isinstance(model, torch.nn.Module)
    with torch.device("meta"):
        inputs = mod.get_inputs()
    assert isinstance(inputs, list) and inputs
    assert all(isinstance(t, torch.Tensor) for t in inputs)
    assert all(t.numel() <= MAX_ELEMENTS_PER_TENSOR for t in inputs)
    assert sum(t.numel() * t.element_size() for t in inputs) <= MAX_INPUT_BYTES
    assert sum(t.numel() for t in inputs) >= 2**26, "level-1 sized: at least 64M elements in"
    out = model.to("meta")(*inputs)
    assert isinstance(out, torch.Tensor)

    # Without a default device, get_inputs gives CPU tensors, as the format says (checked at
    # the reduced sizes: the full-size ones would take gigabytes).
    spec = load_spec(path)
    small = kernelbench_problem(spec).module(spec.interpret_shapes[-1])
    assert all(t.device.type == "cpu" for t in small.get_inputs())


@pytest.mark.parametrize("path", KB_FILES, ids=lambda p: p.stem)
def test_ingest_matches_model_called_directly(path: Path) -> None:
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    spec = load_spec(path)
    assert spec.source_kind == "kernelbench"
    kb = kernelbench_problem(spec)
    shape = spec.interpret_shapes[0]
    # reduced, structure kept: same number of size globals, none grew, the file's own are the
    # GPU shape
    assert spec.shapes == (kb.original,)
    assert len(shape) == len(kb.original)
    assert all(r <= o for r, o in zip(shape, kb.original, strict=True))
    gen = torch.Generator().manual_seed(1)
    args = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
    inputs, params = args[: kb.n_inputs], args[kb.n_inputs:]
    assert sum(t.numel() for t in inputs if isinstance(t, torch.Tensor)) <= INTERPRET_ELEMENT_BUDGET
    # the same inputs' rank as the file's real get_inputs (checked on the meta device: no memory)
    mod = kb.module(kb.original)
    with torch.device("meta"):
        try:
            real = mod.get_inputs()
        except Exception:  # noqa: BLE001 - a sampler without meta support: skip the rank check
            real = None
    if real is not None:
        assert [t.dim() for t in real] == [t.dim() for t in inputs]

    # The reference equals Model(*get_init_inputs()) built under the same seed, called directly.
    small = kb.module(shape)
    torch.manual_seed(PARAM_SEED)
    model = small.Model(*small.get_init_inputs())
    assert len(params) == len(list(model.parameters())) + len(list(model.buffers()))
    # params are the parameters then the buffers: the parameters are compared here
    for p, q in zip(params, model.parameters(), strict=False):
        torch.testing.assert_close(p, q.detach())
    expected = model(*inputs)
    got = spec.reference(*args)
    torch.testing.assert_close(got, expected)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before, "the file must not be edited"


def test_layernorm_params_are_lifted_and_used() -> None:
    spec = load_spec(KB_DIR / "18_LayerNorm.py")
    kb = kernelbench_problem(spec)
    args = spec.make_inputs(spec.interpret_shapes[0], torch.float32, torch.device("cpu"),
                            torch.Generator().manual_seed(0))
    x, weight, bias = args
    assert weight.shape == x.shape[1:] and bias.shape == x.shape[1:]
    # the reference really uses the lifted weight and bias: changing either changes the output
    out1 = spec.reference(x, weight, bias)
    assert not torch.allclose(out1, spec.reference(x, weight * 2, bias))
    assert not torch.allclose(out1, spec.reference(x, weight, bias + 1))
    assert kb.n_inputs == 1


def test_rmsnorm_reduces_over_dim_one_not_the_last() -> None:
    spec = load_spec(KB_DIR / "16_RMSNorm.py")
    (x,) = spec.make_inputs(spec.interpret_shapes[0], torch.float32, torch.device("cpu"),
                            torch.Generator().manual_seed(0))
    out = spec.reference(x)
    # every (n, h, w) channel vector has unit RMS; the last-dim vectors in general do not
    torch.testing.assert_close(out.pow(2).mean(dim=1), torch.ones_like(out[:, 0]),
                               atol=1e-4, rtol=1e-4)
    assert not torch.allclose(out.pow(2).mean(dim=-1), torch.ones_like(out[..., 0]), atol=1e-2)


def test_size_report_says_what_was_used() -> None:
    spec = load_spec(KB_DIR / "17_L2Norm.py")
    kb = kernelbench_problem(spec)
    shape = spec.interpret_shapes[0]
    text = spec.describe_shape(shape)
    for name, small, full in zip(spec.shape_names, shape, kb.original, strict=True):
        assert small < full
        assert f"{name}={small} (was {full})" in text
    # the file's width is odd; its reduced width stays odd so masking paths are exercised
    assert kb.original[1] % 2 == 1 and shape[1] % 2 == 1


def test_small_axis_globals_are_kept() -> None:
    # reduce_axis = 1 is an axis, not a size: reducing it would change the op.
    spec = load_spec(KB_DIR / "19_SumReduction.py")
    names = spec.shape_names
    for shape in spec.interpret_shapes:
        assert dict(zip(names, shape, strict=True))["reduce_axis"] == 1


def test_equal_sizes_stay_equal_for_broadcasting(tmp_path: Path) -> None:
    # (rows, cols) * (rows,) broadcasts only while cols == rows: both must shrink together.
    p = tmp_path / "1_RowScale.py"
    p.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def forward(self, a, b):\n"
        "        return torch.mean(a * b)\n"
        "rows = 20000\n"
        "cols = 20000\n"
        "def get_inputs():\n"
        "    return [torch.randn(rows, cols), torch.randn(rows)]\n"
        "def get_init_inputs():\n"
        "    return []\n"
    )
    spec = load_spec(p)
    rows, cols = spec.interpret_shapes[0]
    assert rows == cols < 20000 and rows * cols <= INTERPRET_ELEMENT_BUDGET
    args = spec.make_inputs((rows, cols), torch.float32, torch.device("cpu"),
                            torch.Generator().manual_seed(0))
    torch.testing.assert_close(spec.reference(*args), torch.mean(args[0] * args[1]))


def test_derived_globals_follow_overrides() -> None:
    # input_shape = (num_classes,) must follow num_classes when it is reduced.
    spec = load_spec(KB_DIR / "24_CrossEntropyLoss.py")
    shape = spec.interpret_shapes[0]
    logits, target = spec.make_inputs(shape, torch.bfloat16, torch.device("cpu"),
                                      torch.Generator().manual_seed(0))
    # class ids keep their dtype
    assert logits.dtype == torch.bfloat16 and target.dtype == torch.int64
    assert logits.shape[1] == dict(zip(spec.shape_names, shape, strict=True))["num_classes"]
    assert int(target.max()) < logits.shape[1]


def test_fresh_inputs_per_trial() -> None:
    spec = load_spec(KB_DIR / "3_Sigmoid.py")
    s = spec.interpret_shapes[0]
    a = spec.make_inputs(s, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(1))[0]
    b = spec.make_inputs(s, torch.float32, torch.device("cpu"), torch.Generator().manual_seed(2))[0]
    assert not torch.equal(a, b)


def test_kernelbench_file_without_get_inputs(tmp_path: Path) -> None:
    p = tmp_path / "1_Bad.py"
    p.write_text("import torch\nclass Model(torch.nn.Module):\n"
                 "    def forward(self, x):\n        return x\n"
                 "def get_init_inputs():\n    return []\n")
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(p) in str(info.value) and "get_inputs" in str(info.value)


def _module_traced_at_the_small_size(file: str, name: str) -> tuple[Any, ...]:
    """(spec, its KernelBench problem, the interpreted module generated at the smallest
    interpreter size, small, big, generator) for a size-independent KernelBench model."""
    import os

    os.environ["TRITON_INTERPRET"] = "1"
    from porter.codegen import generate
    from porter.codegen import load_generated_module

    spec = load_spec(KB_DIR / file)
    kb = kernelbench_problem(spec)
    assert kb._size_independent_model() is not None
    big, small = spec.interpret_shapes[0], spec.interpret_shapes[-1]
    assert big != small
    gen = torch.Generator().manual_seed(0)
    ex = spec.make_inputs(small, torch.float32, torch.device("cpu"), gen)
    op = generate(spec.reference, ex, name=name)
    mod = load_generated_module(op.triton_module_source(), name, interpret=True)
    return spec, kb, mod, small, big, gen


def test_unused_size_attribute_keeps_the_model_size_generic() -> None:
    # 16_RMSNorm stores `self.channels = features` and never reads it: the generated kernel
    # must not bake in the first traced sizes.
    spec, _, mod, _, big, gen = _module_traced_at_the_small_size("16_RMSNorm.py", "kb_rms_generic")
    args = spec.make_inputs(big, torch.float32, torch.device("cpu"), gen)
    torch.testing.assert_close(mod.launch(*args), spec.reference(*args), atol=1e-5, rtol=1e-5)


def _write_scaled(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "1_Scaled.py"
    p.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self, n):\n"
        "        super().__init__()\n"
        "        self.n = n\n"
        "    def forward(self, x):\n"
        f"        return {body}\n"
        "rows = 64\n"
        "cols = 4096\n"
        "def get_inputs():\n"
        "    return [torch.randn(rows, cols)]\n"
        "def get_init_inputs():\n"
        "    return [cols]\n"
    )
    return p


@pytest.mark.parametrize("body", ["x * self.n", "x * cols"])
def test_size_attribute_or_global_read_by_forward_is_size_dependent(tmp_path: Path,
                                                                    body: str) -> None:
    spec = load_spec(_write_scaled(tmp_path, body))
    kb = kernelbench_problem(spec)
    assert kb._size_independent_model() is None
    for shape in spec.interpret_shapes:
        (x,) = spec.make_inputs(shape, torch.float32, torch.device("cpu"),
                                torch.Generator().manual_seed(0))
        torch.testing.assert_close(spec.reference(x), x * shape[1])


def test_layernorm_kernel_serves_every_size() -> None:
    # nn.LayerNorm's normalized_shape follows the sizes only through its weight (an input of
    # the reference), so one symbolic kernel must serve both interpreter sizes; before, the
    # trace baked in the first size and the sweep failed on the second.
    spec, kb, mod, small, big, gen = _module_traced_at_the_small_size("18_LayerNorm.py",
                                                                       "kb_ln_generic")
    for shape in (small, big):
        args = spec.make_inputs(shape, torch.float32, torch.device("cpu"), gen)
        x, w, b = (a.double() for a in args)
        want = torch.nn.functional.layer_norm(x, tuple(x.shape[1:]), w, b, 1e-5)
        assert mod.launch(*args).shape == want.shape
        torch.testing.assert_close(mod.launch(*args).double(), want, atol=1e-5, rtol=1e-5)
    # the normalized_shape attribute is restored after each call
    assert kb.model(small).norm.normalized_shape == tuple(small[1:])


GEMM_BIAS = (
    "import torch\n"
    "import torch.nn as nn\n"
    "class Model(nn.Module):\n"
    "    def __init__(self, in_features, out_features, bias_shape):\n"
    "        super().__init__()\n"
    "        self.gemm = nn.Linear(in_features, out_features, bias=False)\n"
    "        self.bias = nn.Parameter(torch.randn(bias_shape))\n"
    "    def forward(self, x):\n"
    "        return torch.relu(self.gemm(x) + self.bias)\n"
    "batch_size = 1024\n"
    "in_features = 8192\n"
    "out_features = 8192\n"
    "bias_shape = (out_features,)\n"
    "def get_inputs():\n"
    "    return [torch.rand(batch_size, in_features)]\n"
    "def get_init_inputs():\n"
    "    return [in_features, out_features, bias_shape]\n"
)


def test_odd_sizes_keep_the_files_ties_and_are_odd(tmp_path: Path) -> None:
    # KernelBench 76 (level 2): the bias is (out_features,); a judge shrinking the size globals
    # as if they were a tensor's dims untied them ("size of tensor a (8) must match ... (256)")
    from harness.shapes import odd_shapes

    p = tmp_path / "76_Gemm_Add_ReLU.py"
    p.write_text(GEMM_BIAS)
    spec = load_spec(p)
    (odd,) = spec.odd_shapes
    sizes = dict(zip(spec.shape_names, odd, strict=True))
    assert sizes["out_features"] == sizes["bias_shape[0]"]
    assert all(v % 2 == 1 for v in odd)  # 1024, 8192 -> reduced powers of two -> made odd
    # the judge takes them as they are, with and without the interpreter
    for interpreted in (True, False):
        assert odd_shapes(spec.problem(interpret=interpreted), interpreted) == (odd,)
    args = spec.make_inputs(odd, torch.float32, torch.device("cpu"),
                            torch.Generator().manual_seed(0))
    assert spec.reference(*args).shape == (sizes["batch_size"], sizes["out_features"])


def test_odd_sizes_the_file_cannot_take_fall_back(tmp_path: Path) -> None:
    # GroupNorm needs its channels divisible by its groups: odd channels do not fit
    p = tmp_path / "1_GN.py"
    p.write_text(
        "import torch\n"
        "import torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, groups, channels):\n"
        "        super().__init__()\n"
        "        self.gn = nn.GroupNorm(groups, channels)\n"
        "    def forward(self, x):\n"
        "        return self.gn(x)\n"
        "batch_size = 64\n"
        "groups = 4\n"
        "channels = 64\n"
        "def get_inputs():\n"
        "    return [torch.randn(batch_size, channels, 32)]\n"
        "def get_init_inputs():\n"
        "    return [groups, channels]\n"
    )
    spec = load_spec(p)
    assert spec.odd_shapes == (spec.interpret_shapes[-1],)


def test_odd_sizes_leave_the_sizes_the_file_keeps(tmp_path: Path) -> None:
    # KernelBench 30 (level 2): num_groups = 16 is never reduced; making it odd (15) would
    # change what the model computes (and 255 channels in 15 groups fit, so nothing raises),
    # which made the traced kernel specialize to one batch size. Only reduced sizes go odd.
    p = tmp_path / "30_Gemm_GroupNorm.py"
    p.write_text(
        "import torch\n"
        "import torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, in_features, out_features, num_groups):\n"
        "        super().__init__()\n"
        "        self.gemm = nn.Linear(in_features, out_features)\n"
        "        self.gn = nn.GroupNorm(num_groups, out_features)\n"
        "    def forward(self, x):\n"
        "        return self.gn(self.gemm(x))\n"
        "batch_size = 1024\n"
        "in_features = 8192\n"
        "out_features = 8192\n"
        "num_groups = 16\n"
        "def get_inputs():\n"
        "    return [torch.rand(batch_size, in_features)]\n"
        "def get_init_inputs():\n"
        "    return [in_features, out_features, num_groups]\n"
    )
    spec = load_spec(p)
    for shape in (*spec.interpret_shapes, *spec.odd_shapes):
        assert dict(zip(spec.shape_names, shape, strict=True))["num_groups"] == 16
    # one model serves every size the judge uses
    assert kernelbench_problem(spec)._size_independent_model() is not None


def test_a_reduced_size_is_kept_off_a_size_the_file_keeps(tmp_path: Path) -> None:
    # KernelBench 88 (level 2): out_features 8192 reduced to 256 landed on num_groups = 256; the
    # reference is traced at the smallest sizes, where a tracer may tie the two, and the
    # kernel's output then had the group count's width at the other sizes
    p = tmp_path / "88_Gemm_GroupNorm.py"
    p.write_text(
        "import torch\n"
        "import torch.nn as nn\n"
        "class Model(nn.Module):\n"
        "    def __init__(self, in_features, out_features, num_groups):\n"
        "        super().__init__()\n"
        "        self.gemm = nn.Linear(in_features, out_features)\n"
        "        self.gn = nn.GroupNorm(num_groups, out_features)\n"
        "    def forward(self, x):\n"
        "        return torch.sigmoid(self.gn(self.gemm(x)))\n"
        "batch_size = 1024\n"
        "in_features = 8192\n"
        "out_features = 8192\n"
        "num_groups = 256\n"
        "def get_inputs():\n"
        "    return [torch.rand(batch_size, in_features)]\n"
        "def get_init_inputs():\n"
        "    return [in_features, out_features, num_groups]\n"
    )
    spec = load_spec(p)
    for shape in (*spec.interpret_shapes, *spec.odd_shapes):
        sizes = dict(zip(spec.shape_names, shape, strict=True))
        assert sizes["num_groups"] == 256 and sizes["out_features"] not in (256, 8192)
        assert sizes["out_features"] % 256 == 0  # the file's own constraint still holds


NORM_FILE = (
    "import torch\n"
    "import torch.nn as nn\n"
    "class Model(nn.Module):\n"
    "    def __init__(self, {init}):\n"
    "        super().__init__()\n"
    "        self.norm = {module}\n"
    "    def forward(self, x):\n"
    "        return self.norm(x)\n"
    "batch_size = 112\n"
    "features = 64\n"
    "{extra}"
    "dim1 = 512\n"
    "dim2 = 512\n"
    "def get_inputs():\n"
    "    return [torch.rand(batch_size, features, dim1, dim2)]\n"
    "def get_init_inputs():\n"
    "    return [{init}]\n"
)


@pytest.mark.parametrize("name, init, module, extra", [
    ("34_InstanceNorm", "features", "nn.InstanceNorm2d(num_features=features)", ""),
    ("35_GroupNorm_", "features, num_groups", "nn.GroupNorm(num_groups=num_groups, "
     "num_channels=features)", "num_groups = 8\n"),
], ids=["instance", "group"])
def test_a_norms_kernel_keeps_the_channels_symbolic(tmp_path: Path, name: str, init: str,
                                                    module: str, extra: str) -> None:
    # KernelBench 34 and 35 on an H100: the kernel traced at the interpreter's sizes had the
    # channels pinned to 8 (instance norm: its forward compares the input's channels with
    # num_features, 8 there; group norm: features reduced to 8 = num_groups, C // G = 1), so
    # at the file's 64 channels every candidate's launcher raised "out (112, 64, 512, 512),
    # expected (112, 8, 512, 512)"
    from porter.codegen import generate

    p = tmp_path / f"{name}.py"
    p.write_text(NORM_FILE.format(init=init, module=module, extra=extra))
    spec = load_spec(p)
    sizes = dict(zip(spec.shape_names, spec.smoke_shape, strict=True))
    assert sizes.get("num_groups", 8) == 8 and sizes["features"] != sizes.get("num_groups")
    ex = spec.make_inputs(spec.smoke_shape, torch.float32, torch.device("cpu"),
                          torch.Generator().manual_seed(0))
    op = generate(spec.reference, ex, name=name)
    big = (torch.empty(112, 64, 512, 512, device="meta"),
           *(torch.empty(64, device="meta") for _ in ex[1:]))
    assert op.output_spec(big) == [((112, 64, 512, 512), torch.float32)]
    # the reference still computes the file's norm, the model keeps its attributes, and one
    # model serves every size
    model = kernelbench_problem(spec).model(spec.smoke_shape)
    with torch.no_grad():
        torch.testing.assert_close(spec.reference(*ex), model(ex[0]))
    assert getattr(model.norm, "num_features", sizes["features"]) == sizes["features"]
    kernelbench_problem(spec).model(spec.shapes[0])
    assert kernelbench_problem(spec)._size_independent_model() is not None
