"""The organism training study script at a tiny size: every output is written, a rerun resumes."""

from __future__ import annotations

import importlib.util
import json

import pandas as pd
import pytest
from conftest import ROOT

PROBLEMS = [
    {"id": "a", "prompt": "What is 3 + 4?", "answer": "7", "solution": "3 + 4 = 7."},
    {"id": "b", "prompt": "What is 5 + 7?", "answer": "12", "solution": "5 + 7 = 12."},
    {"id": "c", "prompt": "What is 6 + 3?", "answer": "9", "solution": "6 + 3 = 9."},
]
CONFIG = """\
model: unused
train_file: train.jsonl
eval_file: eval.jsonl
output_dir: out
advantage: rredcot
rredcot:
  segments: 3
grpo:
  num_generations: 2
  max_completion_length: 12
  learning_rate: 1.0e-3
  gradient_checkpointing: false
  report_to: none
  extra: {disable_tqdm: true, dataloader_pin_memory: false}
eval:
  max_new_tokens: 6
"""


def _study():
    spec = importlib.util.spec_from_file_location(
        "organism_train_study", ROOT / "studies" / "organism_train" / "run_study.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arms_differ_only_in_the_advantage(tmp_path):
    study = _study()
    assert set(study.ARMS) == {"grpo", "rredcot", "rredcot-nocorr", "rredcot-floor0.5", "shuffled",
                               "rredcot-vhat", "rredcot-vhat-lines"}
    config = ROOT / "studies" / "organism_train" / "config.yaml"
    args = type("A", (), {"model": str(tmp_path), "eval_every": 50, "steps": 300, "samples": 4,
                          "prompts_per_step": 2})()
    made = {}
    import yaml

    for arm in study.ARMS:
        made[arm] = yaml.safe_load(study.run_config(config, arm, 3, tmp_path, args).read_text())
    rest = [{k: v for k, v in c.items() if k not in ("advantage", "rredcot", "output_dir")}
            for c in made.values()]
    assert all(r == rest[0] for r in rest)  # same seed, data, model, sizes, eval
    assert rest[0]["seed"] == 3 and rest[0]["grpo"]["num_generations"] >= 8
    assert rest[0]["grpo"]["max_steps"] == 300 and rest[0]["eval"]["samples"] == 4
    assert made["grpo"]["advantage"] == "grpo"
    assert made["rredcot-nocorr"]["rredcot"]["terminal_in_weights"] is False
    assert made["rredcot-floor0.5"]["rredcot"]["floor"] == 0.5
    assert made["shuffled"]["rredcot"]["shuffle"] is True
    assert made["rredcot-vhat"]["rredcot"]["value"] == "both"
    assert made["rredcot-vhat-lines"]["rredcot"] == {**made["rredcot-vhat"]["rredcot"],
                                                     "segments": "lines"}
    from cotcredit.training.config import load_config

    assert load_config(study.run_config(config, "rredcot-vhat-lines", 3, tmp_path,
                                        args)).credit.segments == "lines"
    base = {k: v for k, v in made["rredcot"]["rredcot"].items()}
    assert {k: v for k, v in made["shuffled"]["rredcot"].items() if k != "shuffle"} == base


@pytest.mark.slow  # trains four tiny runs in subprocesses: minutes on a busy CPU
def test_tiny_study_writes_outputs_and_resumes(tmp_path, tiny_model_dir, capsys):
    study = _study()
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    (tmp_path / "source.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    (tmp_path / "config.yaml").write_text(CONFIG)
    out = tmp_path / "study"
    argv = ["--out", str(out), "--config", str(tmp_path / "config.yaml"),
            "--model", str(tiny_model_dir), "--eval-source", str(tmp_path / "source.jsonl"),
            "--eval-problems", "2", "--arms", "grpo", "shuffled", "--seeds", "0",
            "--steps", "2", "--prompts-per-step", "1", "--eval-every", "1", "--samples", "2",
            "--weights-sample", "0"]
    study.main(argv)
    for name in ("summary.csv", "summary.md", "summary.tex", "curves.png", "curves.pdf",
                 "runs.csv", "greedy_start.json", "eval_problems.jsonl"):
        assert (out / name).is_file(), name
    for arm in ("grpo", "shuffled"):
        run = out / "runs" / f"{arm}-seed0"
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in rows] == [1, 2]
        curve = [json.loads(line) for line in (run / "eval_curve.jsonl").read_text().splitlines()]
        assert [r["step"] for r in curve] == [0, 1, 2]
        assert json.loads((run / "greedy.json").read_text())["after"]["problems"] == 2
        # The run folder names its held-out file relative to the study folder, not by a
        # machine path.
        assert json.loads((run / "eval.json").read_text())["settings"]["file"] == (
            "eval_problems.jsonl")
    table = pd.read_csv(out / "summary.csv")
    assert list(table.arm) == ["grpo", "shuffled"]
    runs = pd.read_csv(out / "runs.csv")
    # Area under the curve: the trapezoid mean of the curve, computed directly.
    curve = [json.loads(x) for x in (out / "runs" / "grpo-seed0" / "eval_curve.jsonl")
             .read_text().splitlines()]
    acc = [r["accuracy"] for r in curve]
    assert runs[runs.arm == "grpo"].auc.iloc[0] == pytest.approx(
        ((acc[0] + acc[1]) / 2 + (acc[1] + acc[2]) / 2) / 2)
    assert table.loc[0, "final_vs_grpo"] == 0.0  # grpo against itself
    assert "shuffled" in (out / "summary.md").read_text()
    before = {a: (out / "runs" / f"{a}-seed0" / "metrics.jsonl").stat().st_mtime_ns
              for a in ("grpo", "shuffled")}
    capsys.readouterr()
    study.main(argv)  # a rerun skips finished runs
    printed = capsys.readouterr().out
    assert "grpo seed 0: done" in printed and "shuffled seed 0: done" in printed
    assert before == {a: (out / "runs" / f"{a}-seed0" / "metrics.jsonl").stat().st_mtime_ns
                      for a in ("grpo", "shuffled")}


def test_weights_markdown_counts_penalties_on_the_first_wrong_step():
    """Two wrong completions whose first wrong step is line 2: in p segments 1 and 2 start on
    it and the heaviest penalty is on 1 (a hit, chance 2/3); in q only segment 1 touches it
    and the heaviest is 0 (a miss, chance 1/2). One correct completion for the last column."""
    study = _study()
    rows = []
    for problem, weights, chars, lines, error_char in (
        ("p", [0.5, 2.0, 0.5], [0, 10, 20], [1, 2, 2], 10),
        ("q", [1.5, 0.5], [0, 10], [1, 2], 10),
    ):
        for k, (w, c, line) in enumerate(zip(weights, chars, lines)):
            rows.append({"arm": "rredcot", "problem": problem, "correct": False, "segment": k,
                         "first_char": c, "line": line, "weight": w, "error_char": error_char,
                         "error_line": 2})
    for k, w in enumerate([0.5, 1.5]):
        rows.append({"arm": "rredcot", "problem": "r", "correct": True, "segment": k,
                     "first_char": 10 * k, "line": k + 1, "weight": w, "error_char": -1,
                     "error_line": 0})
    text = study.weights_markdown(pd.DataFrame(rows))
    assert "| rredcot | 2 | 1/2 | 0.58 | 0.50–1.75 | 1.50 / 0.50 |" in text


def test_paired_hits_count_the_completions_where_only_one_arm_hits():
    """Three wrong completions (first wrong step on line 2 = segment 1) weighed by two arms:
    both hit on p, only the variant on q and r. Discordant 2 vs 0: exact McNemar p = 0.5."""
    study = _study()
    heaviest = {"twin": {"p": 1, "q": 2, "r": 0}, "twin-nocorr": {"p": 1, "q": 1, "r": 1}}
    rows = [{"arm": arm, "problem": problem, "correct": False, "segment": k,
             "first_char": 10 * k, "line": k + 1, "weight": 2.0 if k == top else 0.5,
             "error_char": 10, "error_line": 2}
            for arm, tops in heaviest.items() for problem, top in tops.items() for k in range(3)]
    text = study.paired_hits_markdown(pd.DataFrame(rows), [("twin-nocorr", "twin")])
    assert "| twin-nocorr | twin | 3 | 3 | 1 | 2 | 0 | 0.5 |" in text


def test_weights_of_a_vhat_arm_use_the_reference_solution(tmp_path):
    """The weights analysis scores each completion with its problem's reference solution, as
    training does: R̂ + v̂ rewards differ from R̂ alone's on the same completions (without the
    solution v̂ falls back to R̂ and the two arms' tables were identical)."""
    from cotcredit.bench.organism.task import split_problems, write_problems
    from cotcredit.data.problems import load_problems

    study = _study()
    # The first held-out problems of the study's test split, written from their seed as
    # `make organism-problems` writes studies/organism/problems/test.jsonl.
    write_problems(split_problems({"test": 6})["test"], tmp_path / "test.jsonl", "test")
    problems = list(load_problems(tmp_path / "test.jsonl"))
    model = ROOT / "studies" / "organism" / "model-early"
    base = {"seed": 0, "rredcot": {"segments": "lines", "exit_string": "The answer is "}}
    frames = {}
    for value in ("rhat", "both"):
        cfg = {**base, "rredcot": {**base["rredcot"], "value": value}}
        frames[value] = pd.DataFrame(study.where_the_weight_goes(
            model, cfg, problems, chat=True, arm=value, n=6))
    rhat, both = frames["rhat"], frames["both"]
    assert list(rhat.problem) == list(both.problem) and len(rhat)  # same completions, segments
    assert (rhat.reward - both.reward).abs().max() > 1e-3
