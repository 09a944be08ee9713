"""The organism study script end to end at a tiny size (every step is a CLI process: slow)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "organism_study" / "run_study.py"


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
        "organism_segmentation", ROOT / "examples" / "organism_segmentation" / "run_study.py")
    seg_study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(seg_study)
    seg_study.main(["--out", str(tmp_path / "seg"), "--study", str(tmp_path / "org"),
                    "--regime", "full", "--bootstrap", "50"])
    out = tmp_path / "seg" / "full"
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
