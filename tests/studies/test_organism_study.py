"""The organism study script end to end at a tiny size (every step is a CLI process: slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT

SCRIPT = ROOT / "studies" / "organism_study" / "run_study.py"


def _study():
    spec = importlib.util.spec_from_file_location("organism_study", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_reasoning_lines_match_segment_candidates():
    study = _study()
    assert study.reasoning_lines("7 + 5 = 12\n12 - 9 = 3\nThe answer is 3.") == 2
    assert study.reasoning_lines("7 + 5 = 12\n\n12 - 9 = 3\n") == 2
    assert study.reasoning_lines("7 + 5") == 1


@pytest.mark.slow
def test_study_at_tiny_size(tmp_path):
    study = _study()
    study.main(["--out", str(tmp_path), "--regime", "full", "--traces", "3", "--rollouts", "2",
                "--ig-steps", "2", "--bootstrap", "50"])
    out = tmp_path / "full"
    traces = [json.loads(x) for x in (out / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 3 and all("error_char" in t for t in traces)
    seg = pd.read_parquet(out / "segments.parquet")
    for t in traces:  # one segment per reasoning line
        got = seg[seg.trace_id == t["id"]]
        assert len(got) == study.reasoning_lines(t["response"])
    mc = pd.read_parquet(out / "mc.parquet")
    assert set(mc.n_rollouts) == {2}
    assert (out / "rollouts.parquet").exists() and (out / "localization.csv").exists()
    loc = pd.read_csv(out / "localization.csv")
    assert {"loo", "mc", "baseline: random segment"} <= set(loc.method)
    assert (out / "report").is_dir()
    # the tables name the model by a relative path, never a machine path
    assert "/tmp" not in json.dumps(json.loads((out / "steps.json").read_text()))


@pytest.mark.slow
def test_segmentation_study_at_tiny_size(tmp_path):
    """The segmentation study on a tiny organism study: its hybrid segmentations have the
    asked-for number of segments, and a method compared with itself on the steps differs by 0."""
    _study().main(["--out", str(tmp_path / "org"), "--regime", "full", "--traces", "6",
                   "--rollouts", "2", "--ig-steps", "2", "--bootstrap", "50"])
    spec = importlib.util.spec_from_file_location(
        "organism_segmentation", ROOT / "studies" / "organism_segmentation" / "run_study.py")
    seg_study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg_study)
    seg_study.main(["--out", str(tmp_path / "seg"), "--study", str(tmp_path / "org"),
                    "--regime", "full", "--bootstrap", "50", "--mc-traces", "5"])
    out = tmp_path / "seg" / "full"
    # Monte Carlo on each hybrid segmentation: its first 5 traces, the study's rollout count,
    # and at every boundary it shares with the steps the study's very rollouts (keyed per trace
    # and token boundary), so no success count differs there.
    agreement = pd.read_csv(out / "mc_agreement.csv")
    for name in seg_study.SEGMENTATIONS:
        mc = pd.read_parquet(out / name / "mc.parquet")
        assert mc.trace_id.nunique() == 5 and set(mc.n_rollouts) == {2}
        shared, differ = seg_study.shared_boundaries(tmp_path / "org" / "full", out / name,
                                                     sorted(set(mc.trace_id)))
        assert shared >= 5 and differ == 0  # at least every trace's prompt boundary
        assert (out / name / "report" / "report.md").exists()
    assert set(agreement.differing_counts.dropna()) <= {0}
    assert set(agreement.segmentation) <= {"steps", "k8", "k4"}
    # The per-trace agreement is Spearman of the credits with MC's, as a direct computation.
    from scipy.stats import spearmanr

    study_dir = tmp_path / "org" / "full"
    traces = sorted(set(pd.read_parquet(study_dir / "mc.parquet").trace_id))
    per = seg_study.per_trace_agreement(study_dir, traces, 50)
    loo = pd.read_parquet(study_dir / "attr.parquet")
    loo, mcs = loo[loo.method == "loo"], pd.read_parquet(study_dir / "mc.parquet")
    for t in traces:
        a = loo[loo.trace_id == t].sort_values("segment").score.to_numpy()
        b = mcs[mcs.trace_id == t].sort_values("segment").score.to_numpy()
        if len(a) >= 3 and a.std() > 0 and b.std() > 0:
            assert per.loc[t, "loo"] == pytest.approx(spearmanr(a, b).statistic, abs=1e-9)
    for name, k in seg_study.SEGMENTATIONS.items():
        seg = pd.read_parquet(out / name / "segments.parquet")
        assert (seg.groupby("trace_id").size() <= k).all()
    table = pd.read_csv(out / "localization.csv")
    assert set(table.segmentation) <= {"steps", "k8", "k4"} and "steps" in set(table.segmentation)
    org = seg_study.organism_study()
    labels = org.label_traces(tmp_path / "org" / "full" / "raw_traces.jsonl",
                              tmp_path / "org" / "full" / "traces.jsonl")
    ids, hits, _ = org.localization_hits(tmp_path / "org" / "full", labels)
    steps = table[table.segmentation == "steps"].set_index("method")
    for method in steps.index:  # the steps rows are the organism study's own hits
        assert steps.loc[method, "top1"] == pytest.approx(hits[method].mean(), abs=1e-3)


def test_run_skips_a_finished_step_and_marks_a_resumed_one(tmp_path, monkeypatch):
    """A rerun keeps the recorded cost of finished steps (no relaunch), relaunches a step that
    never finished and marks it resumed, and always reruns a step asked to."""
    study = _study()
    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr(study.subprocess, "run", lambda argv, cwd: calls.append(argv) or Done())
    argv = ["segment", "traces.jsonl"]
    log = {"seg": {"command": "cotcredit segment traces.jsonl", "seconds": 123.4}}
    study.run(tmp_path, "seg", argv, log)
    assert calls == [] and log["seg"]["seconds"] == 123.4
    study.run(tmp_path, "seg", argv, log, always=True)
    assert len(calls) == 1 and log["seg"]["seconds"] < 123.4 and "resumed" not in log["seg"]
    log["mc"] = {"command": "cotcredit mc-baseline traces.jsonl", "started": True}
    study.run(tmp_path, "mc", ["mc-baseline", "traces.jsonl"], log)
    assert len(calls) == 2 and log["mc"]["resumed"] is True and "seconds" in log["mc"]
    study.run(tmp_path, "seg", ["segment", "traces.jsonl", "-k", "4"], log)  # a new command
    assert len(calls) == 3 and log["seg"]["command"].endswith("-k 4")
    assert json.loads((tmp_path / "steps.json").read_text()) == log


def _write_run(folder: Path, responses: dict[str, str], scores: dict[str, list[float]],
               correct: dict[str, list[int]], method: str = "loo") -> None:
    folder.mkdir(parents=True)
    (folder / "raw_traces.jsonl").write_text(
        "".join(json.dumps({"id": t, "response": r}) + "\n" for t, r in responses.items()))
    seg, attr, mc = [], [], []
    for t, s in scores.items():
        for i, v in enumerate(s):
            seg.append({"trace_id": t, "segment": i, "char_start": 10 * i, "char_end": 10 * i + 10})
            attr.append({"trace_id": t, "segment": i, "method": method, "score": v})
            mc.append({"trace_id": t, "segment": i, "method": "mc", "score": 0.0,
                       "n_rollouts": 128, "n_correct": correct[t][i]})
    pd.DataFrame(seg).to_parquet(folder / "segments.parquet")
    pd.DataFrame(attr).to_parquet(folder / "attr.parquet")
    pd.DataFrame(mc).to_parquet(folder / "mc.parquet")


def test_reproduction_check(tmp_path):
    """compare_runs calls equal runs exact, float rounding within tolerance, a changed score or
    a Monte Carlo value beyond sampling error different, and compares only identical traces."""
    check = _study().load_reproduce()
    tables = ("attr.parquet", "mc.parquet")
    ids = [f"t{i}" for i in range(40)]
    responses = {t: f"response {t}" for t in ids}
    scores = {t: [0.5, -1.25, 2.0] for t in ids}
    correct = {t: [40, 64, 100] for t in ids}
    _write_run(tmp_path / "ref", responses, scores, correct)

    def status(name, **changes):
        r, s, c = dict(responses), dict(scores), dict(correct)
        for key, value in changes.items():
            {"responses": r, "scores": s, "correct": c}[key].update(value)
        _write_run(tmp_path / name, r, s, c)
        result = check.compare_runs(tmp_path / "ref", tmp_path / name, tables)
        return {c.table.split()[-1]: c.status for c in result.checks}, result.ok

    assert status("same") == ({"traces": "exact", "segments": "exact", "loo": "exact",
                               "mc": "exact"}, True)
    got, ok = status("rounding", scores={"t3": [0.5, -1.25 * (1 + 2e-7), 2.0]})
    assert got["loo"] == "within tolerance" and ok
    got, ok = status("changed", scores={"t3": [0.5, -1.2, 2.0]})
    assert got["loo"] == "different" and not ok
    got, _ = status("loo-5e-4", scores={"t3": [0.5, -1.25 * (1 + 5e-4), 2.0]})
    assert got["loo"] == "different"  # a forward method: beyond float32 rounding
    for name in ("ref-ig", "ig-5e-4"):  # a gradient method: a backward pass, more rounding
        s = dict(scores, t3=[0.5, -1.25 * (1 + 5e-4), 2.0]) if name == "ig-5e-4" else scores
        _write_run(tmp_path / name, responses, s, correct, method="gradient-ig")
    result = check.compare_runs(tmp_path / "ref-ig", tmp_path / "ig-5e-4", tables)
    assert [c.status for c in result.checks if "gradient" in c.table] == ["within tolerance"]
    # Another machine's rollouts: every count moved by a little (well inside 3 SE).
    got, ok = status("resampled", correct={t: [42, 61, 103] for t in ids})
    assert got["mc"] == "within sampling error" and ok
    got, ok = status("biased", correct={t: [40, 64, 60] for t in ids})
    assert got["mc"] == "different" and not ok
    # A trace sampled differently is another trace: reported, and left out downstream.
    got, ok = status("resampled-trace", responses={"t5": "another"},
                     scores={"t5": [9.0, 9.0, 9.0]})
    assert got["traces"] == "different" and got["loo"] == "exact" and not ok


def test_value_default_rule_needs_every_lower_bound_above_zero():
    """The --value re-check's rule: the candidate wins only if both paired differences exclude
    0 from below in both regimes."""
    spec = importlib.util.spec_from_file_location(
        "vhat_organism", ROOT / "studies" / "vhat_selection" / "organism" / "run_check.py")
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)

    def figures(top1_lo, mc_lo):
        return {"rredcot": {"top1_minus_rhat": [0.3, top1_lo, 0.5],
                            "mc_spearman_minus_rhat": [0.2, mc_lo, 0.4]}}

    assert check.decide({"full": figures(0.1, 0.05), "early": figures(0.2, 0.01)})[
        "default"] == "--value both"
    for bad in [(0.0, 0.05), (0.1, -0.01)]:
        got = check.decide({"full": figures(0.1, 0.05), "early": figures(*bad)})
        assert got["default"].startswith("--value rhat")


def test_a_missing_problem_file_is_written_from_its_seed(tmp_path, monkeypatch):
    """The organism's problem files are not tracked: `problem_file` writes every split when
    the asked one is absent (the same problems as `split_problems`) and leaves it alone after."""
    from cotcredit.bench.organism.task import split_problems
    from studies.organism import problems

    monkeypatch.setattr(problems, "PROBLEMS", tmp_path)
    monkeypatch.setattr(problems, "SIZES", {"train": 5, "dev": 3, "test": 4})
    path = problems.problem_file("test")
    assert path == tmp_path / "test.jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dev.jsonl", "test.jsonl",
                                                          "train.jsonl"]
    prompts = [json.loads(line)["prompt"] for line in path.read_text().splitlines()]
    assert prompts == [p.prompt for p in split_problems({"test": 4})["test"]]
    (tmp_path / "dev.jsonl").write_text("kept\n")
    assert problems.problem_file("dev").read_text() == "kept\n"
