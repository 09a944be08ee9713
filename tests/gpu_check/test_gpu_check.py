"""benchmarks/gpu_check on CPU at tiny sizes: every part runs and gives plausible figures,
packed probes agree with naive scoring, and the script runs where captum, shap, trl, datasets,
gguf and math_verify cannot be imported (as on the borrowed GPU machines)."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT

from benchmarks.gpu_check import agreement, run, shapes, timing, traces, train

SCRIPT = ROOT / "benchmarks" / "gpu_check"  # a folder: `python benchmarks/gpu_check` runs it
BLOCKED = ("captum", "shap", "trl", "datasets", "gguf", "math_verify")

# Runs the script with a meta path finder that refuses the blocked packages, and writes the
# names of every module imported by the end of the run.
WRAPPER = """
import importlib.abc, json, runpy, sys

blocked = set(sys.argv[1].split(","))


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in blocked:
            raise ImportError(f"No module named {top!r} (blocked)", name=top)
        return None


sys.meta_path.insert(0, Refuse())
script, modules_file = sys.argv[2], sys.argv[3]
sys.argv = [script, *sys.argv[4:]]
try:
    runpy.run_path(script, run_name="__main__")
finally:
    with open(modules_file, "w") as f:
        json.dump(sorted(sys.modules), f)
"""



def run_script(args, tmp: Path, blocked: tuple[str, ...] = ()):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "COLUMNS": "160"}
    out, modules = tmp / "out.json", tmp / "modules.json"
    # A generous budget: the test checks figures, not speed, on a possibly busy machine.
    argv = ["--device", "cpu", "--small", "--budget", "900", "--json", str(out), *args]
    cmd = [sys.executable, "-c", WRAPPER, ",".join(blocked) or "-", str(SCRIPT), str(modules),
           *argv]
    proc = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text()), json.loads(modules.read_text())


@pytest.fixture(scope="module")
def blocked_run(tmp_path_factory):
    """The whole --small run with the optional packages made unimportable."""
    return run_script([], tmp_path_factory.mktemp("gpu_check"), BLOCKED)


@pytest.mark.subprocess
def test_runs_without_the_optional_packages(blocked_run):
    proc, report, modules = blocked_run
    assert not [m for m in modules if m.split(".")[0] in BLOCKED]
    train = report["parts"]["train"]
    assert train["status"] == "skipped: trl is not installed"
    assert train["rows"] == [] and "wheels" in " ".join(train["notes"])
    bench = report["parts"]["bench"]
    assert bench["status"] == "skipped: math_verify is not installed" and bench["rows"] == []
    # Every other part ran to the end.
    assert [p for p, r in report["parts"].items() if r["status"] != "ok"] == ["bench", "train"]
    # The table went to stdout, with one line per figure row.
    for part in run.PARTS:
        assert part in proc.stdout


@pytest.mark.subprocess
def test_report_names_device_versions_and_date(blocked_run):
    import torch
    import transformers

    _, report, _ = blocked_run
    meta = report["meta"]
    assert meta["device"] == "cpu" and meta["device_name"]
    assert meta["torch"] == torch.__version__
    assert meta["transformers"] == transformers.__version__
    assert datetime.datetime.fromisoformat(meta["date"]).tzinfo is not None
    assert meta["small"] is True
    assert list(report["parts"]) == list(run.PARTS)
    for part in report["parts"].values():
        assert part["budget_s"] > 0 and part["seconds"] >= 0


@pytest.mark.subprocess
def test_packed_probes_agree_with_naive_scoring(blocked_run):
    _, report, _ = blocked_run
    part = report["parts"]["agreement"]
    assert part["ok"] is True and part["tolerance"]["fp32_nats"] == agreement.TOL_FP32
    rows = part["rows"]
    plan = shapes.SMALL_PLAN
    assert {(r["model"], r["quantity"]) for r in rows} == {
        (m, q) for m in plan.agreement_models for q in ("rhat", "vhat", "vhat_multi", "loo")
    }
    for r in rows:
        assert r["values"] == r["segments"] + 1 == plan.agreement_segments + 1
        assert len(r["fp32_values"]["packed"]) == len(r["bf16_values"]["naive"]) == r["values"]
        assert r["fp32_packed_vs_naive"] <= agreement.TOL_FP32
        # The check has teeth: values differ between probes far more than packed vs naive.
        assert r["spread"] > 10 * agreement.TOL_FP32
        # bfloat16: packed is as faithful to the float32 reference as naive bfloat16.
        assert r["bf16_ok"] is True
        assert r["bf16_packed_vs_fp32"] <= r["bf16_tolerance"]
        assert r["bf16_tolerance"] == pytest.approx(
            agreement.BF16_FACTOR * r["bf16_naive_vs_fp32"]
            + agreement.BF16_FLOOR_PER_TOKEN * r["scored_tokens"]
        )
    gemma = [r for r in rows if r["model"] == "gemma3-tiny"]
    window = shapes.SMALL["gemma3-tiny"].window
    assert all(r["tokens"] > 4 * window for r in gemma)  # the sliding window really bites


@pytest.mark.subprocess
def test_speed_rows_cover_the_plan_with_plausible_figures(blocked_run):
    _, report, _ = blocked_run
    rows = report["parts"]["speed"]["rows"]
    plan = shapes.SMALL_PLAN
    expected = [(n, k, m) for n, ks in plan.speed_runs for m in plan.speed_models for k in ks]
    assert len(rows) == len(expected)
    for r, (n, k, m) in zip(rows, expected, strict=True):
        assert (r["model"], r["segments_asked"]) == (m, k)
        assert n - 40 <= r["tokens"] <= n  # the trace is cut at a line end below the size asked
        assert r["segments"] == k
        for key in ("plain_s", "rhat_s", "both_s", "multi_s", "naive_rhat_s", "rhat_x_plain",
                    "both_x_plain", "multi_x_plain", "naive_x_packed", "naive_probes_x_packed"):
            assert r[key] > 0, key
        assert r["rhat_s"] == pytest.approx(r["rhat_x_plain"] * r["plain_s"])
        # Hardware-independent costs: v̂ adds probe tokens, and more references more of them;
        # naive reruns every prefix.
        assert r["multi_probe_tokens"] > r["both_probe_tokens"] > r["rhat_probe_tokens"] > 0
        assert r["naive_probe_tokens"] > 2 * r["rhat_probe_tokens"]
        assert r["plain_peak_gib"] is None  # no accelerator memory on CPU


@pytest.mark.subprocess
def test_generation_rows_count_completions_and_tokens(blocked_run):
    _, report, _ = blocked_run
    rows = report["parts"]["generation"]["rows"]
    plan = shapes.SMALL_PLAN
    assert [r["batch"] for r in rows] == list(plan.generation_batches)
    for r in rows:
        assert r["completions"] == r["prompts"] * r["samples"] == r["batch"]
        assert r["truncated"] <= r["completions"]
        assert r["completions"] <= r["new_tokens"] <= r["completions"] * r["max_new_tokens"]
        assert r["tokens_per_s"] == pytest.approx(r["new_tokens"] / r["seconds"])
        assert r["completions_per_s"] > 0


@pytest.mark.subprocess
def test_mc_rows_compare_rollouts_with_plain_generation(blocked_run):
    _, report, _ = blocked_run
    rows = report["parts"]["mc"]["rows"]
    plan = shapes.SMALL_PLAN
    assert [r["model"] for r in rows] == list(plan.mc_models)
    for r in rows:
        assert r["rows"] == (plan.mc_segments + 1) * plan.mc_rollouts
        assert 1 <= r["batch"] <= r["rows"]
        assert 0 < r["mc_tokens_per_row"] <= plan.mc_new_tokens
        assert r["mc_tokens_per_s"] > 0 and r["plain_tokens_per_s"] > 0
        assert r["plain_over_mc"] == pytest.approx(r["plain_tokens_per_s"] / r["mc_tokens_per_s"],
                                                   rel=0.5)
        # Each rollout has its own random stream: the same samples in every repeat and at
        # half the batch size (float32 on CPU).
        assert r["mc_identical_across_repeats"] is True and r["same_at_half_batch"] == 1.0


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    # trl, datasets, math-verify are dependencies of cotcredit: a broken install fails here.
    return run_script(["--parts", "bench,train"], tmp_path_factory.mktemp("gpu_check_full"))


@pytest.mark.subprocess
def test_bench_part_runs_the_regimes_with_mc_and_baselines(full_run):
    _, report, _ = full_run
    part = report["parts"]["bench"]
    assert part["status"] == "ok", part
    (row,) = part["rows"]
    assert row["regime"] == "unique" and row["failures"] == [] and row["seconds"] > 0
    methods = row["methods"]
    assert {"mc", "rredcot", "refdiff", "entropy"} <= set(methods)
    assert methods["mc"]["generated_tokens"] > 0 and methods["rredcot"]["generated_tokens"] == 0
    assert methods["rredcot"]["seconds"] > 0 and methods["refdiff"]["forward_tokens"] == 0


@pytest.mark.subprocess
def test_training_part_runs_every_source_and_form(full_run):
    _, report, _ = full_run
    part = report["parts"]["train"]
    assert part["status"] == "ok", part
    grpo, rr, *sources = part["rows"]
    assert [(r["mode"], r["form"]) for r in sources] == list(train.SOURCES_AND_FORMS)
    for r in sources:
        assert r["steps"] == 1 and r["train_s"] > 0 and r["step_time"] > 0
        scored = r["rredcot/scored_fraction"]
        assert scored is None if r["mode"] == "grpo" else 0.0 <= scored <= 1.0
    assert (grpo["mode"], rr["mode"]) == ("grpo", "rredcot")
    for r in (grpo, rr):
        assert r["steps"] == 1 and r["train_s"] > 0 and r["step_time"] > 0
    assert not [k for k in grpo if k.startswith("rredcot/")]
    # The reward varies between completions, so every completion was scored by RREDCoT.
    assert rr["rredcot/scored_fraction"] == 1.0
    assert rr["rredcot/segments_mean"] > 0 and rr["rredcot/scoring_seconds"] > 0


def test_tokenizer_fills_the_model_vocabulary():
    tok = traces.build_tokenizer(4096)
    assert len(tok) == 4096
    assert tok.decode([4095]).strip()  # a filler id a random model may sample decodes to text
    trace = traces.synthetic_trace(tok, 256, prompt_len=20)
    ids = tok(trace.response, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == trace.response
    reasoning = trace.response.split("</think>")[0]
    assert reasoning.count("\n") > 5 and "Wait" in reasoning and "So" in reasoning


@pytest.fixture(params=["default", "ignored"])
def sigint(request):
    """SIGINT as in a terminal, and ignored, as for a job started in the background."""
    import signal

    saved = signal.getsignal(signal.SIGINT)
    handler = signal.SIG_IGN if request.param == "ignored" else signal.default_int_handler
    signal.signal(signal.SIGINT, handler)
    yield handler
    signal.signal(signal.SIGINT, saved)


def test_a_part_past_its_deadline_is_stopped_and_the_next_runs(monkeypatch, sigint):
    import signal

    def hang(ctx, deadline, result):
        result["rows"].append({"started": True})
        end = time.monotonic() + 20  # bounded: a broken watchdog fails the test, never hangs it
        while time.monotonic() < end:  # never checks its deadline: the watchdog must stop it
            time.sleep(0.01)

    def quick(ctx, deadline, result):
        result["rows"].append({"ran": True})

    monkeypatch.setattr(timing, "GRACE_S", 0.2)
    # A full collection in a long test process can take seconds on a loaded machine and eat the
    # next part's budget: the deadlines are what is checked here.
    monkeypatch.setattr(run, "free_memory", lambda: None)
    monkeypatch.setitem(run.RUNNERS, "agreement", hang)
    monkeypatch.setitem(run.RUNNERS, "speed", quick)
    args = argparse.Namespace(budget=4.0, json=None)  # agreement's share: 1.2 s
    ctx = run.RunContext(args, None, shapes.SMALL_PLAN, shapes.SMALL, {"parts": {}})
    run.run_parts(ctx, ["agreement", "speed"])
    hung, ran = ctx.report["parts"]["agreement"], ctx.report["parts"]["speed"]
    assert hung["status"] == "skipped: time" and hung["rows"] == [{"started": True}]
    assert hung["seconds"] < 3.0
    assert ran["status"] == "ok" and ran["rows"] == [{"ran": True}]
    assert signal.getsignal(signal.SIGINT) == sigint  # the handler is given back


def test_models_tokens_and_segments_narrow_the_plan():
    plan = shapes.only_models(shapes.REAL_PLAN, ["qwen2.5-1.5b"])
    assert plan.agreement_models == plan.speed_models == plan.generation_models == (
        "qwen2.5-1.5b",
    )
    assert plan.train_model == "qwen2.5-1.5b"
    plan = shapes.with_sizes(shapes.REAL_PLAN, [256, 512], [4])
    assert plan.speed_runs == ((256, (4,)), (512, (4,)))
    assert (plan.agreement_tokens, plan.agreement_segments) == (256, 4)
