"""Op spec loading: every example loads; bad specs fail with a SpecError naming the file."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from porter.errors import SpecError
from porter.specs import load_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SPECS = sorted((ROOT / "examples").glob("*/spec.py"))

GOOD = """
import torch
def reference(x, w):
    return x * w
def make_inputs(shape, dtype, device, generator):
    return (torch.randn(*shape, generator=generator, device=device).to(dtype),
            torch.randn(shape[-1], generator=generator, device=device).to(dtype))
SHAPES = [(4096, 4096)]
"""


def _write(tmp_path: Path, text: str, name: str = "spec.py") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def test_there_are_nine_example_specs() -> None:
    names = {p.parent.name for p in EXAMPLE_SPECS}
    assert {"rmsnorm", "layernorm", "softmax", "gelu", "swiglu", "add_rmsnorm", "cross_entropy",
            "rotary", "matmul_bias_gelu"} <= names


@pytest.mark.parametrize("path", EXAMPLE_SPECS, ids=lambda p: p.parent.name)
def test_example_spec_loads(path: Path) -> None:
    spec = load_spec(path)
    assert spec.name == path.parent.name
    assert spec.source_kind == "spec"
    assert spec.shapes and spec.interpret_shapes
    # interpreter shapes are really reduced: none bigger than the smallest real shape
    smallest_real = min(torch.Size(s).numel() for s in spec.shapes)
    assert all(torch.Size(s).numel() <= smallest_real for s in spec.interpret_shapes)
    assert spec.bytes_moved is not None, "every example declares the bytes that must move"
    problem = spec.problem(interpret=True)
    assert problem.extra["interpret_shapes"] == spec.interpret_shapes
    assert tuple(problem.sweep_shapes) == spec.shapes


def test_rmsnorm_spec_points_at_the_existing_kernel() -> None:
    spec = load_spec(ROOT / "examples" / "rmsnorm")
    assert spec.triton_kernel is not None and spec.triton_kernel.name == "_rmsnorm_fwd_kernel"
    assert spec.triton_launcher is not None and spec.triton_launcher.__name__ == "rmsnorm_forward"
    assert "_rmsnorm_fwd_kernel" in spec.triton_kernel.source


def test_good_minimal_spec(tmp_path: Path) -> None:
    spec = load_spec(_write(tmp_path, GOOD))
    assert spec.name == tmp_path.name
    assert spec.interpret_shapes == ((7, 1024),)  # default reduction keeps power-of-two widths


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="nope.py: no such file"):
        load_spec(tmp_path / "nope.py")


def test_missing_reference_names_file(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("def reference(x, w)", "def ref(x, w)"))
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(p) in str(info.value) and "no reference" in str(info.value)


def test_mismatched_inputs_name_file_and_signature(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("def reference(x, w)", "def reference(x, w, b)"))
    with pytest.raises(SpecError) as info:
        load_spec(p)
    msg = str(info.value)
    assert str(p) in msg and "make_inputs returns 2 input(s)" in msg and "reference(x, w, b)" in msg


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD + "\ndef broken(:\n    pass\n")
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(p) in str(info.value) and "syntax error at line" in str(info.value)


def test_import_error_names_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "import torch\nx = 1\nimport not_a_module_anywhere\n" + GOOD)
    with pytest.raises(SpecError, match=r"import failed at line 3: ModuleNotFoundError"):
        load_spec(p)


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ("kernel.py", "must look like 'kernel.py::_kernel_name'"),
        ("missing.py::_k", "TRITON_KERNEL: no file"),
        ("kernel.py::_nope", "kernel.py has no '_nope'"),
        ("kernel.py::not_a_kernel", "not a @triton.jit kernel"),
    ],
    ids=["no-separator", "no-file", "no-attribute", "not-jit"],
)
def test_bad_kernel_path(tmp_path: Path, kernel: str, expected: str) -> None:
    (tmp_path / "kernel.py").write_text("def not_a_kernel():\n    pass\n")
    p = _write(tmp_path, GOOD + f"\nTRITON_KERNEL = {kernel!r}\n")
    with pytest.raises(SpecError) as info:
        load_spec(p)
    assert str(p) in str(info.value) and expected in str(info.value)


def test_reference_that_fails_is_reported(tmp_path: Path) -> None:
    p = _write(tmp_path, GOOD.replace("return x * w", "return x @ w.reshape(3, -1)"))
    with pytest.raises(SpecError, match="reference failed on the smoke shape"):
        load_spec(p)


@pytest.mark.parametrize("shapes", ["[(4096.5, 3)]", "[(True, 3)]", "[('4096', 3)]"])
def test_a_size_that_is_not_an_int_is_refused(tmp_path: Path, shapes: str) -> None:
    """SHAPES = [(4096.5, 3)] was cut to 4096 x 3 and ported (issue 48): refused, naming it."""
    p = _write(tmp_path, GOOD.replace("SHAPES = [(4096, 4096)]", f"SHAPES = {shapes}"))
    with pytest.raises(SpecError, match="SHAPES must be a list of tuples of ints"):
        load_spec(p)
