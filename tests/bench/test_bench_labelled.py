"""`cotcredit bench --traces FILE --model M`: a user's labelled traces as the regime (a
ProcessBench-shaped file, a file with `error_char`), their checks before any model loads, and
the groups regime."""

from __future__ import annotations

import json
import random

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from cotcredit.bench import BenchSize, run_bench
from cotcredit.errors import UserError

TINY = BenchSize(problems=1, samples=1, rollouts=4, n_boot=50, splits=2)
#: A folder the checks must refuse before they would try to load it.
NO_MODEL = "/nonexistent/model"


def processbench_file(path, problems=6, samples=3, seed=0):
    """ProcessBench's shape: problem, steps, label (first wrong step, -1 none),
    final_answer_correct; plus the reference answer the methods need."""
    rng = random.Random(seed)
    rows = []
    for p in range(problems):
        for j in range(samples):
            steps = [f"Step {k}: {p} plus {k} is {p + k}." for k in range(4)]
            label = rng.choice([-1, 1, 2, 3])
            if label >= 0:
                steps[label] = f"Step {label}: oops {p}."
            rows.append({"id": f"p{p}-{j}", "problem": f"What is {p} plus 3?", "steps": steps,
                         "label": label, "answer": str(p + 3),
                         "final_answer_correct": label < 0 or rng.random() < 0.3})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def error_char_file(path, problems=6, samples=3, seed=1):
    """Responses with a reference solution, `error_char` and a `correct` field: wrong lines,
    valid other orders (correct, departing from the solution) and the solution itself."""
    rng = random.Random(seed)
    rows = []
    for p in range(problems):
        lines = [f"a{p} = 1", f"b{p} = 2", f"c{p} = 3"]
        solution = "\n".join(lines) + "\nThe answer is 6."
        for j in range(samples):
            kind = rng.choice(["wrong", "valid", "same"])
            mine = list(lines)
            error = -1
            if kind == "valid":
                mine[0], mine[1] = mine[1], mine[0]
            elif kind == "wrong":
                at = rng.randrange(3)
                mine[at] = f"oops{p} = 9"
            text = "\n".join(mine) + f"\nThe answer is {7 if kind == 'wrong' else 6}."
            if kind == "wrong":
                error = text.index("oops")
            rows.append({"id": f"e{p}-{j}", "problem_id": f"q{p}", "prompt": f"Add for {p}.",
                         "response": text, "answer": "6", "solution": solution,
                         "correct": kind != "wrong", "error_char": error,
                         "part": "dev" if p < 2 else "test"})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_bench_on_a_processbench_file(tiny_model_dir, tmp_path, capsys):
    src = tmp_path / "pb.jsonl"
    rows = processbench_file(src)
    out = tmp_path / "out"
    code, _, err = run_cli(["bench", "--traces", str(src), "--format", "processbench",
                            "--model", str(tiny_model_dir), "-o", str(out), "--size", "quick",
                            "--methods", "rredcot,loo", "--set", "mc.rollouts=4",
                            "--set", "mc.max_new_tokens=4", "--threads", "1", "--no-reports"],
                           capsys)
    assert code == 0, err
    board = pd.read_csv(out / "leaderboard.csv")
    assert list(board["method"]) == ["rredcot", "loo", "mc", "entropy", "position",
                                     "position-length", "random"]
    for col in ("loc_top1", "loc_n", "blame_departure", "blame_wrong_step", "tokens",
                "loc_best", "loc_vs_best_n"):
        assert col in board.columns
    assert (out / "comparisons.md").exists() and (out / "leaderboard.md").exists()
    splits = {s: [json.loads(x) for x in (out / "traces" / s / "traces.jsonl").read_text()
                  .splitlines()] for s in ("dev", "test")}
    problems = {s: {r["prompt"] for r in recs} for s, recs in splits.items()}
    assert problems["dev"] and problems["test"] and not problems["dev"] & problems["test"]
    assert sum(map(len, splits.values())) == len(rows)
    # one segment per step; the localization set: a wrong step and a wrong answer
    seg = pd.read_parquet(out / "traces" / "test" / "segments.parquet")
    assert (seg.groupby("trace_id").size() == 4).all()
    test = {r["id"]: r for r in splits["test"]}
    wrong = [i for i, r in test.items() if r["error_char"] >= 0 and not r["correct"]]
    assert board.loc[board.method == "rredcot", "loc_n"].iloc[0] == len(wrong)
    by_id = {r["id"]: r for r in rows}
    for tid in wrong:  # the label became the offset of the labelled step
        steps = by_id[tid]["steps"]
        assert test[tid]["error_char"] == sum(len(s) + 2 for s in steps[:by_id[tid]["label"]])


def test_bench_on_an_error_char_file_with_a_split_field(tiny_model_dir, tmp_path):
    src = tmp_path / "errors.jsonl"
    rows = error_char_file(src)
    result = run_bench(output=tmp_path / "out", size=TINY, traces=str(src), split_field="part",
                       model=str(tiny_model_dir), methods="rredcot-rhat", threads=1,
                       reports=False, sets=("mc.max_new_tokens=4",))
    assert result.failures == []
    board = result.leaderboard.set_index("method")
    assert {"rredcot-rhat", "mc", "refdiff", "refdiff-solutions", "refdiff-siblings",
            "entropy"} <= set(board.index)
    test = [r for r in rows if r["part"] == "test"]
    # false blame on valid departures: right traces with no wrong step leaving the solution
    departing = [r for r in test if r["correct"] and r["response"] != r["solution"]]
    assert board.loc["refdiff", "blame_departure_n"] == len(departing)
    assert board.loc["refdiff", "blame_departure"] == 1.0  # it blames every one of them
    # refdiff-siblings follows the right responses to the same problem: it blames the
    # departures no right sibling shares, and orders nothing (a tie: 1/3) on the others
    hits = [1 / 3 if any(o["problem_id"] == r["problem_id"] and o["id"] != r["id"]
                         and o["correct"] and o["response"] == r["response"] for o in test)
            else 1.0 for r in departing]
    assert 1 / 3 in hits and 1.0 in hits
    assert board.loc["refdiff-siblings", "blame_departure"] == pytest.approx(np.mean(hits))
    assert board.loc["rredcot-rhat", "reads"] == "none"
    assert board.loc["rredcot-rhat", "loc_best"] in ("entropy", "position", "position-length",
                                                      "random")
    wrong = [r for r in test if r["error_char"] >= 0]
    assert board.loc["refdiff", "loc_top1"] == 1.0 and board.loc["refdiff", "loc_n"] == len(
        wrong)
    assert np.isfinite(board.loc["mc", "tokens"]) and board.loc["mc", "tokens"] > 0


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(label=9), "field 'label' is 9, outside the 4 steps"),
    (lambda r: r.update(response="x\nThe answer is 3.", steps=None), "labels steps but the "
     "trace has none"),
    (lambda r: r.update(label=None), None),  # an unlabelled trace is left out, no error
])
def test_bad_labels_are_one_line_before_any_model_loads(tmp_path, change, message):
    src = tmp_path / "pb.jsonl"
    rows = processbench_file(src, problems=2, samples=1)
    change(rows[1])
    if rows[1].get("steps") is None:
        rows[1].pop("steps")
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if message is None:
        from cotcredit.bench.labelled import LabelledTraces
        from cotcredit.data.trace import FieldOptions

        found = LabelledTraces(src, fields=FieldOptions(preset="processbench")).read()
        assert sum(len(v) for v in found.values()) == 2
        return
    with pytest.raises(UserError, match=message) as err:
        run_bench(output=tmp_path / "out", traces=str(src), model=NO_MODEL, size=TINY,
                  inputs=_processbench())
    assert "\n" not in str(err.value) and f"{src}:2:" in str(err.value)
    assert not (tmp_path / "out").exists()


def _processbench():
    from cotcredit.data.trace import FieldOptions

    return FieldOptions(preset="processbench")


def test_other_mistakes_are_one_line_before_any_model_loads(tmp_path):
    src = tmp_path / "errors.jsonl"
    rows = error_char_file(src)
    with pytest.raises(UserError, match="'part' is 'train'; expected dev or test"):
        rows[3]["part"] = "train"
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        run_bench(output=tmp_path / "o", traces=str(src), split_field="part", model=NO_MODEL)
    for r in rows:
        r.pop("error_char")
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match="no trace has a first-error label"):
        run_bench(output=tmp_path / "o", traces=str(src), model=NO_MODEL)
    with pytest.raises(UserError, match="outside the response"):
        rows[0]["error_char"] = 10_000
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
        run_bench(output=tmp_path / "o", traces=str(src), model=NO_MODEL)
    with pytest.raises(UserError, match="one or the other"):
        run_bench("unique", output=tmp_path / "o", traces=str(src), model=NO_MODEL)
    with pytest.raises(UserError, match="apply to --traces"):
        run_bench("unique", output=tmp_path / "o", model=NO_MODEL)
    with pytest.raises(UserError, match="no such file"):
        run_bench(output=tmp_path / "o", traces=str(tmp_path / "none.jsonl"))
    rows[0]["error_char"] = -1
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match="unknown method or variant 'nope'"):
        run_bench(output=tmp_path / "o", traces=str(src), sets=("nope.x=1",))
    assert not (tmp_path / "o").exists()


# ----------------------------------------------------------------------------- groups


def test_groups_are_multipath_problems_with_its_model():
    from cotcredit.bench import get_regime

    groups, multipath = get_regime("groups"), get_regime("multipath")
    assert groups.problems("test", 5) == multipath.problems("test", 5)  # same ids and prompts
    assert groups.model() == multipath.model()
    assert groups.sampling == multipath.sampling
    problem = groups.problems("dev", 1)[0]
    assert groups.check(problem, problem.solutions[1]).correct


def test_what_each_row_reads_decides_its_baselines(monkeypatch):
    """R̂ alone and the attribution methods read no solution; R̂ + v̂ what its references name;
    a method's options may say; an unknown method meets every baseline."""
    import dataclasses
    from typing import ClassVar

    from cotcredit.bench.variants import method_runs, read_variants, reads
    from cotcredit.methods import MethodSpec, registry

    runs = {r.label: r for r in method_runs(None, read_variants(None))}
    found = {label: reads(r) for label, r in runs.items()}
    assert found == {**found, "rredcot": "siblings", "rredcot-one-reference": "solution",
                     "rredcot-rhat": "none", "mc": "none", "loo": "none", "shapley": "none",
                     "gradient": "none"}

    @dataclasses.dataclass(frozen=True)
    class Declared:
        reads: ClassVar[str] = "solutions"

    @dataclasses.dataclass(frozen=True)
    class Silent:
        pass

    for name, cls in (("declared", Declared), ("silent", Silent)):
        monkeypatch.setitem(registry(), name, MethodSpec(name=name, options_type=cls,
                                                         run=lambda c, o: None,
                                                         labels=lambda o, n=name: [n]))
    runs = method_runs("declared,silent", {})
    assert [reads(r) for r in runs[:2]] == ["solutions", "siblings"]
