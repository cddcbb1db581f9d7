# Two commands do everything on a fresh machine (see README.md):
#   make demo   set up, then port an example kernel to every target and show the result
#   make test   set up, then run the test suite
# Set-up makes .venv (seeing the system's packages, so a GPU machine keeps its own CUDA/ROCm torch)
# and installs torch==2.13.0 only when no torch is importable: on a CPU machine that is the CPU
# build from local disk, never a multi-GB CUDA download. Then the project (`pip install -e .`);
# `make test` adds the test extra (`pip install -e '.[test]'`: pytest, pytest-xdist, ruff), then
# runs ruff (the [tool.ruff] rules in pyproject.toml) before the suite.
# The Metal executor (M4's emulated tier) builds kernels with a C++ compiler: g++ or clang++ from
# the system, installed with apt-get when neither is there (else M4 stays at the emitted tier).

PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
export TRITON_DEFAULT_FP_FUSION ?= 1

.PHONY: setup demo test

$(VENV)/.installed: pyproject.toml
	command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends g++) || \
	  echo "no C++ compiler: M4 kernels stay at the emitted tier (apt-get install g++)"
	$(PY) -m venv --system-site-packages $(VENV)
	$(VPY) -c "import torch" 2>/dev/null || $(VPY) -m pip install -q torch==2.13.0
	$(VPY) -m pip install -q -e .
	touch $@

# The test extra (pytest, pytest-xdist, ruff) on top, once; redone whenever set-up is.
$(VENV)/.installed-test: $(VENV)/.installed
	$(VPY) -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/porter hw list
	$(VENV)/bin/porter compile examples/rmsnorm/kernel.py::_rmsnorm_fwd_kernel --targets a100,h100,b200,mi300x --constexpr BLOCK_N=4096 --dtype bf16
	$(VENV)/bin/porter port examples/rmsnorm/spec.py --targets a100,h100,h200,b200,mi300x,m4 --out packs/
	$(VENV)/bin/porter pack show packs/rmsnorm

# The Triton the GPU machines run (this machine's is newer), installed apart for the compile
# check with their compiler (PORTER_TRITON_PATH, targets/isolated.py): registers as they see
# them (tests/targets/test_device_triton.py). Where the install fails, that test says so and
# skips.
DEVICE_TRITON ?= 3.6.0
DEVICE_TRITON_DIR := .device-triton/$(DEVICE_TRITON)

$(DEVICE_TRITON_DIR)/.installed: $(VENV)/.installed
	$(VPY) -m pip install -q --no-deps --target $(DEVICE_TRITON_DIR) triton==$(DEVICE_TRITON) \
	  && touch $@ || echo "could not install triton==$(DEVICE_TRITON) into $(DEVICE_TRITON_DIR)"

# `python -m ruff`, not .venv/bin/ruff: where the system's packages already hold ruff==0.17.6,
# pip installs nothing into .venv and there is no .venv/bin/ruff.
test: $(VENV)/.installed-test $(DEVICE_TRITON_DIR)/.installed
	$(VPY) -m ruff check .
	PORTER_DEVICE_TRITON=$(CURDIR)/$(DEVICE_TRITON_DIR) $(VPY) -m pytest -q -n 2 tests
