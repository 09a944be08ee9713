"""RREDCoT's numbers pinned: rows of the tiny model's run (seed 0) recorded before the method
became a package, so a restructure that changes any value fails here. Three variants: the
default (every known path, siblings from the input file), the one-reference estimator, and
log space with suffixes, a mean mixture, noisy-or and advantage sums."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from conftest import SAMPLE_TRACES

from cotcredit.methods.rredcot import RredcotOptions
from cotcredit.pipeline.run import run_analysis
from cotcredit.segmentation import SegmentOptions

A = "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12."
BASE = {"prompt": "What do 3 apples cost at 4 each?", "answer": "12", "solution": A}
RECORDS = [
    {**BASE, "id": "p1-a", "problem_id": "p1", "correct": True,
     "response": "Apples cost 4 each.\nSo 3 apples cost 12.\nThe answer is 12."},
    {**BASE, "id": "p1-b", "problem_id": "p1", "correct": False,
     "response": "Apples cost 4 each.\nSo 3 apples cost 13.\nThe answer is 13."},
    {**BASE, "id": "p1-c", "problem_id": "p1", "correct": True,
     "response": "There are 3 apples.\nAt 4 each they cost 12.\nThe answer is 12."},
    *SAMPLE_TRACES,
]
OPTIONS = {
    "default": {},
    "one_reference": {"references": "solution", "solution_part": "remaining",
                      "empty_part": "keep"},
    "log_suffixes": {"space": "log", "solution_part": "suffixes", "mixture": "mean",
                     "combination": "noisy-or", "sum_to": "advantage"},
}
# (trace, segment, score, R̂, v̂, g after the segment), rounded to 9 decimals.
PINNED = {
    "default": [
        ('p1-a', 0, 2.159e-06, -13.046087265, -133.891174224, 2.159e-06),
        ('p1-a', 1, 3.6e-08, -13.029666901, -55.851110458, 2.194e-06),
        ('p1-a', 2, 0.999997806, -13.053027153, -150.077960491, 2.144e-06),
        ('p1-b', 0, 2.159e-06, -13.046087265, -133.891175178, 2.159e-06),
        ('p1-b', 1, 3.6e-08, -13.029666901, -55.851110935, 2.194e-06),
        ('p1-b', 2, -2.194e-06, -13.0374403, -55.877695084, 2.177e-06),
        ('p1-c', 0, 2.11e-06, -13.068692684, -133.857692242, 2.11e-06),
        ('p1-c', 1, 2.3e-08, -13.057673454, -133.821806908, 2.134e-06),
        ('p1-c', 2, 0.999997866, -13.025780678, -133.890147686, 2.203e-06),
        ('t1', 0, 2.12e-06, -13.064014435, -186.418550491, 2.12e-06),
        ('t1', 1, -1e-09, -13.064705372, -186.401874065, 2.119e-06),
        ('t1', 2, 0.999997881, -13.061048985, -186.418934345, 2.126e-06),
        ('t2', 0, 4.484e-06, -12.314901352, None, 4.484e-06),
        ('t2', 1, 2.6e-08, -12.3090868, None, 4.511e-06),
        ('t2', 2, 0.999995489, -12.3048172, None, 4.53e-06),
        ('t3', 0, 4.748e-06, -12.257757187, None, 4.748e-06),
        ('t3', 1, -3.3e-08, -12.264721394, None, 4.715e-06),
        ('t3', 2, 0.999995285, -12.264651299, None, 4.716e-06),
    ],
    "one_reference": [
        ('p1-a', 0, 2.159e-06, -13.046087265, -133.89117384, 2.159e-06),
        ('p1-a', 1, 3.6e-08, -13.029666901, -55.851110458, 2.194e-06),
        ('p1-a', 2, 0.999997806, -13.053027153, -13.053027153, 4.287e-06),
        ('p1-b', 0, 2.159e-06, -13.046087265, -133.891174316, 2.159e-06),
        ('p1-b', 1, 3.6e-08, -13.029667377, -55.851109982, 2.194e-06),
        ('p1-b', 2, -2.194e-06, -13.0374403, -13.0374403, 4.355e-06),
        ('p1-c', 0, 2.11e-06, -13.068692684, -133.857692242, 2.11e-06),
        ('p1-c', 1, 2.3e-08, -13.057673454, -55.734751701, 2.134e-06),
        ('p1-c', 2, 0.999997866, -13.025780678, -13.025780678, 4.406e-06),
        ('t1', 0, 2.12e-06, -13.064014435, -186.418550491, 2.12e-06),
        ('t1', 1, -1e-09, -13.064705372, -186.401874065, 2.119e-06),
        ('t1', 2, 0.999997881, -13.061048985, -13.061048985, 4.253e-06),
        ('t2', 0, 4.484e-06, -12.314901352, None, 4.484e-06),
        ('t2', 1, 2.6e-08, -12.3090868, None, 4.511e-06),
        ('t2', 2, 0.999995489, -12.3048172, None, 4.53e-06),
        ('t3', 0, 4.748e-06, -12.257757187, None, 4.748e-06),
        ('t3', 1, -3.3e-08, -12.264721394, None, 4.715e-06),
        ('t3', 2, 0.999995285, -12.264651299, None, 4.716e-06),
    ],
    "log_suffixes": [
        ('p1-a', 0, 0.006210327, -13.046087265, -56.515803335, -13.046087265),
        ('p1-a', 1, 0.016419888, -13.029667377, -56.544258116, -13.029667377),
        ('p1-a', 2, 13.029667377, -13.05302763, -56.555918215, -13.05302763),
        ('p1-b', 0, 0.006210327, -13.046087265, -56.515803812, -13.046087265),
        ('p1-b', 1, 0.016419888, -13.029667377, -56.544256685, -13.029667377),
        ('p1-b', 2, -0.78584318, -13.0374403, -56.570841311, -13.0374403),
        ('p1-c', 0, -0.016395092, -13.068692684, -55.77135849, -13.068692684),
        ('p1-c', 1, 0.01101923, -13.057673454, -55.734751701, -13.057673454),
        ('p1-c', 2, 13.057673454, -13.025780678, -55.774990559, -13.025780678),
        ('t1', 0, 0.007261753, -13.064014435, -186.418550491, -13.064014435),
        ('t1', 1, -0.000690937, -13.064705372, -186.401874065, -13.064705372),
        ('t1', 2, 13.064705372, -13.061048985, -186.418934345, -13.061048985),
        ('t2', 0, -0.00537014, -12.314901352, None, -12.314901352),
        ('t2', 1, 0.005814552, -12.3090868, None, -12.3090868),
        ('t2', 2, 12.3090868, -12.3048172, None, -12.3048172),
        ('t3', 0, -0.004573822, -12.257757187, None, -12.257757187),
        ('t3', 1, -0.006964207, -12.264721394, None, -12.264721394),
        ('t3', 2, 12.264721394, -12.264651299, None, -12.264651299),
    ],
}


@pytest.mark.parametrize("variant", list(OPTIONS))
def test_rows_equal_the_recorded_ones(scorer, tmp_path, variant):
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    run = run_analysis(path, scorer, methods={"rredcot": RredcotOptions(**OPTIONS[variant])},
                       segment_options=SegmentOptions(segments=3))
    rows = pd.DataFrame(run.rows["rredcot"])
    assert [(r.trace_id, r.segment) for r in rows.itertuples()] == [
        (t, k) for t, k, *_ in PINNED[variant]]
    for r, (_, _, score, r_hat, v_hat, g_after) in zip(rows.itertuples(), PINNED[variant],
                                                       strict=True):
        log_g = r.space == "log"
        assert r.score == pytest.approx(score, rel=1e-4, abs=1e-4 if log_g else 2e-9)
        assert r.r_hat == pytest.approx(r_hat, abs=1e-4)
        assert (v_hat is None) == (r.v_hat is None or math.isnan(r.v_hat))
        if v_hat is not None:
            assert r.v_hat == pytest.approx(v_hat, abs=1e-4)
        assert r.g_after == pytest.approx(g_after, rel=1e-4, abs=1e-4 if log_g else 2e-9)
