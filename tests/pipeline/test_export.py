"""Exporting segment scores as JSON Lines (cotcredit.pipeline.export), against naive expectations
and against the readers of each format (`datasets`, cotcredit's ProcessBench reader)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cotcredit.errors import UserError
from cotcredit.pipeline.export import EXPORT_FORMATS, export_scores

PROMPTS = {"t1": "What is 5 + 7?", "t2": "What is 3 + 4?", "t3": "Two pears at 4 each?"}
TEXTS = {
    "t1": ["Apples cost 5.\n", "Oranges cost 7.\n", "So 5 + 7 = 12."],
    "t2": ["3 + 4 = 8?\n", "No, 3 + 4 = 7."],
    "t3": ["A pear costs 4.\n", "Two cost 8.\n", "Check: 4 + 4 = 8.\n", "Answer: 8"],
}
SCORES = {  # per method and trace; t2's mc scores hold a NaN, t3's rredcot scores a tie at 0
    "rredcot": {"t1": [0.25, -0.5, 0.75], "t2": [-0.125, 0.5], "t3": [0.0, 0.3, -0.2, 0.1]},
    "mc": {"t1": [0.5, 0.0, 0.25], "t2": [math.nan, 0.5], "t3": [0.125, -0.125, 0.0, 0.5]},
}


def score_table(methods=("rredcot", "mc"), shuffle: bool = True) -> pd.DataFrame:
    """A tidy table as the pipeline writes it: segmentation columns, then each method's own
    columns (left null on the other methods' rows), rows in a scrambled order."""
    rows = []
    for method in methods:
        for tid, texts in TEXTS.items():
            start = 0
            for k, text in enumerate(texts):
                row = {
                    "run_id": f"run-{method}", "trace_id": tid, "segment": k,
                    "char_start": start, "char_end": start + len(text),
                    "token_start": 2 * k, "token_end": 2 * k + 2, "n_tokens": 2, "text": text,
                    "method": method, "score": SCORES[method][tid][k],
                }
                start += len(text)
                if method == "rredcot":
                    row |= {"r_hat": 0.1 * k, "v_hat": None}  # v_hat: all null (--value rhat)
                else:
                    row |= {"value_after": 0.5, "n_rollouts": 8, "interpolated": k == 1,
                            "score_half_b": math.nan}  # all NaN (one rollout)
                rows.append(row)
    df = pd.DataFrame(rows)
    if shuffle:
        df = df.sample(frac=1.0, random_state=3).reset_index(drop=True)
    return df


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def first_seen_order(df: pd.DataFrame, method: str) -> list[str]:
    return list(dict.fromkeys(df.loc[df["method"] == method, "trace_id"]))


# ---- step formats -------------------------------------------------------------------------------
def load_with_datasets(path: Path) -> list[dict]:
    """The file as the `datasets` library loads it (what PRM training code reads)."""
    datasets = pytest.importorskip("datasets")
    return list(datasets.load_dataset("json", data_files=str(path), split="train"))


@pytest.mark.parametrize("threshold", [0.0, 0.2, -0.3])
def test_processbench_label_is_the_first_step_not_above_threshold(tmp_path, threshold):
    df = score_table()
    out = tmp_path / "pb.jsonl"
    res = export_scores(df, PROMPTS, out, format="processbench", method="rredcot",
                        threshold=threshold, outcomes={"t1": 1.0, "t2": 0.0})
    expected = []
    for t in first_seen_order(df, "rredcot"):
        ok = [s > threshold for s in SCORES["rredcot"][t]]
        expected.append({"id": t, "problem": PROMPTS[t], "steps": [x.strip() for x in TEXTS[t]],
                         "label": ok.index(False) if False in ok else -1,
                         "final_answer_correct": {"t1": True, "t2": False}.get(t)})
    assert read_lines(out) == expected
    assert (res.format, res.n_written, res.skipped_nan) == ("processbench", 3, [])
    assert load_with_datasets(out) == expected  # the columns ProcessBench's evaluators read


def test_processbench_reads_back_as_processbench(tmp_path):
    """cotcredit's own ProcessBench reader takes the export: same problem, steps, first error."""
    from cotcredit.data.trace import format_names
    from cotcredit.data.traces import iter_traces

    df = score_table(("rredcot",))
    df["outcome"] = df["trace_id"].map({"t1": 1.0, "t2": 0.0, "t3": 1.0})
    out = tmp_path / "pb.jsonl"
    export_scores(df, PROMPTS, out, format="processbench", threshold=0.0)
    traces = {t.id: t for t in iter_traces(out, format_names("processbench"),
                                           require_answer=False)}
    for line in read_lines(out):
        t = traces[line["id"]]
        assert t.prompt == line["problem"] and len(t.steps) == len(line["steps"])
        assert t.error_step == line["label"]
        assert t.outcome == float(line["final_answer_correct"])  # from the outcome column


def test_openrlhf_prm_has_one_label_per_placeholder(tmp_path):
    df = score_table()
    out = tmp_path / "prm.jsonl"
    export_scores(df, PROMPTS, out, format="openrlhf-prm", method="rredcot", threshold=0.1)
    lines = load_with_datasets(out)
    assert [set(line) for line in lines] == [{"input", "label"}] * 3
    for line, t in zip(lines, first_seen_order(df, "rredcot")):
        # OpenRLHF puts label k at the k-th placeholder token: counts must match, in order.
        assert line["input"].count(" ки") == len(line["label"]) == len(TEXTS[t])
        assert line["label"] == ["+" if s > 0.1 else "-" for s in SCORES["rredcot"][t]]
        head, *steps = line["input"].split("\n")
        assert head == PROMPTS[t]
        assert [s.removesuffix(" ки") for s in steps] == [x.strip() for x in TEXTS[t]]
    export_scores(df, PROMPTS, out, format="openrlhf-prm", method="rredcot", placeholder="<s>")
    assert read_lines(out)[0]["input"].count(" <s>") == 3
    with pytest.raises(UserError, match="trace 't1': step 1 holds the placeholder 'Oranges'"):
        export_scores(df, PROMPTS, out, format="openrlhf-prm", method="rredcot",
                      placeholder="Oranges")


def test_step_rewards_are_the_scores_with_their_spans(tmp_path):
    df = score_table()
    out = tmp_path / "r.jsonl"
    res = export_scores(df, PROMPTS, out, format="step-rewards", method="mc")
    lines = {line["id"]: line for line in load_with_datasets(out)}
    assert res.skipped_nan == [] and len(lines) == 3  # rewards keep NaN (as null)
    for t, line in lines.items():
        expected = [None if math.isnan(s) else s for s in SCORES["mc"][t]]
        assert line["rewards"] == expected
        assert line["token_spans"] == [[2 * k, 2 * k + 2] for k in range(len(TEXTS[t]))]
        starts = np.cumsum([0] + [len(x) for x in TEXTS[t]])
        assert line["char_spans"] == [[int(a), int(b)] for a, b in zip(starts, starts[1:])]
        assert (line["prompt"], line["steps"]) == (PROMPTS[t], [x.strip() for x in TEXTS[t]])
    no_tokens = df.drop(columns=["token_start", "token_end"])
    export_scores(no_tokens, PROMPTS, out, format="step-rewards", method="mc")
    assert all(line["token_spans"] is None for line in read_lines(out))


@pytest.mark.parametrize("fmt", ["processbench", "openrlhf-prm"])
def test_label_formats_leave_out_and_report_nan_traces(tmp_path, fmt):
    out = tmp_path / "sub" / "prm.jsonl"  # parent folders are created
    res = export_scores(score_table(), PROMPTS, out, format=fmt, method="mc")
    assert res.skipped_nan == ["t2"] and res.n_written == len(read_lines(out)) == 2
    df = score_table(("mc",))
    df["score"] = math.nan
    res = export_scores(df, PROMPTS, out, format=fmt)
    assert res.n_written == 0 and sorted(res.skipped_nan) == ["t1", "t2", "t3"]
    assert out.read_text() == ""


def test_the_old_trl_format_names_its_replacements(tmp_path):
    with pytest.raises(UserError) as e:
        export_scores(score_table(), PROMPTS, tmp_path / "a.jsonl", format="trl-stepwise",
                      method="mc")
    assert str(e.value) == ("export format 'trl-stepwise' is gone (TRL no longer has "
                            "PRMTrainer); use processbench, openrlhf-prm, step-rewards or jsonl")
    assert "\n" not in str(e.value) and not (tmp_path / "a.jsonl").exists()


# ---- jsonl ---------------------------------------------------------------------------------------
def naive_records(df: pd.DataFrame, method: str, own: list[str]) -> list[dict]:
    """The jsonl records built by hand: segments in order, every standard column, then the
    method's own columns (`own`), NaN as null."""
    standard = ["segment", "text", "score", "char_start", "char_end", "token_start",
                "token_end", "n_tokens"]
    records = []
    for tid in first_seen_order(df, method):
        rows = df[(df["method"] == method) & (df["trace_id"] == tid)].sort_values("segment")
        segments = []
        for _, r in rows.iterrows():
            seg = {}
            for c in standard + own:
                v = r[c]
                if isinstance(v, (np.generic,)):
                    v = v.item()
                seg[c] = None if v is None or (isinstance(v, float) and math.isnan(v)) else v
            segments.append(seg)
        records.append({"trace_id": tid, "run_id": f"run-{method}", "method": method,
                        "prompt": PROMPTS[tid], "segments": segments})
    return records


@pytest.mark.parametrize(("method", "own"), [
    ("rredcot", ["r_hat", "v_hat"]),
    ("mc", ["value_after", "n_rollouts", "interpolated", "score_half_b"]),
])
def test_jsonl_records_hold_every_column_of_the_method(tmp_path, method, own):
    df = score_table()
    res = export_scores(df, PROMPTS, tmp_path / "s.jsonl", format="jsonl", method=method)
    got = read_lines(tmp_path / "s.jsonl")
    assert got == naive_records(df, method, own)
    assert res.n_written == 3 and res.skipped_nan == []  # jsonl keeps NaN traces (as null)
    # Key order: standard columns first, then the method's own; other methods' columns absent.
    assert list(got[0]["segments"][0]) == ["segment", "text", "score", "char_start", "char_end",
                                           "token_start", "token_end", "n_tokens", *own]
    # Types survive: ints stay ints, bools stay bools.
    seg = got[0]["segments"][1]
    assert type(seg["segment"]) is int and type(seg["char_end"]) is int
    if method == "mc":
        assert seg["interpolated"] is True and type(seg["n_rollouts"]) is int


def test_jsonl_run_id_is_null_when_a_trace_mixes_runs(tmp_path):
    df = score_table(("rredcot",), shuffle=False)
    df.loc[(df["trace_id"] == "t1") & (df["segment"] == 0), "run_id"] = "other-run"
    export_scores(df, PROMPTS, tmp_path / "s.jsonl", format="jsonl")
    run_ids = {r["trace_id"]: r["run_id"] for r in read_lines(tmp_path / "s.jsonl")}
    assert run_ids == {"t1": None, "t2": "run-rredcot", "t3": "run-rredcot"}


def test_every_format_replaces_the_output_file(tmp_path):
    out = tmp_path / "prm.jsonl"
    out.write_text("stale\n" * 10)
    for fmt in EXPORT_FORMATS:
        res = export_scores(score_table(), PROMPTS, out, format=fmt, method="rredcot")
        assert len(out.read_text().splitlines()) == res.n_written == 3
    assert [p.name for p in tmp_path.iterdir()] == ["prm.jsonl"]  # no temporary file left


# ---- choosing the method, errors -------------------------------------------------------------
def test_a_single_method_needs_no_choice(tmp_path):
    res = export_scores(score_table(("mc",)), PROMPTS, tmp_path / "a.jsonl", format="jsonl")
    assert res.method == "mc"
    assert {r["method"] for r in read_lines(tmp_path / "a.jsonl")} == {"mc"}


def test_several_methods_need_a_choice(tmp_path):
    with pytest.raises(UserError) as e:
        export_scores(score_table(), PROMPTS, tmp_path / "a.jsonl")
    assert str(e.value) == "the scores hold 2 methods (mc, rredcot); choose one with --method"
    with pytest.raises(UserError) as e:
        export_scores(score_table(), PROMPTS, tmp_path / "a.jsonl", method="loo")
    assert str(e.value) == ("method 'loo' is not in the scores (they hold: mc, rredcot); "
                            "choose one with --method")
    assert not (tmp_path / "a.jsonl").exists()


def test_missing_prompts_are_named(tmp_path):
    with pytest.raises(UserError) as e:
        export_scores(score_table(), {"t1": "p"}, tmp_path / "a.jsonl", method="mc")
    msg = str(e.value)
    assert msg.startswith("no prompt for 2 trace(s) (") and "'t2'" in msg and "'t3'" in msg
    assert msg.endswith("pass the traces file the scores were computed from")
    many = pd.concat([score_table(("mc",)).assign(trace_id=lambda d, i=i: d["trace_id"] + f"-{i}")
                      for i in range(3)])
    with pytest.raises(UserError, match=r"no prompt for 9 trace\(s\) \('.*' and 4 more\); pass"):
        export_scores(many, {}, tmp_path / "a.jsonl")


def test_a_prompt_of_another_method_s_trace_is_not_needed(tmp_path):
    df = score_table()
    df = df[~((df["method"] == "mc") & (df["trace_id"] == "t3"))]
    prompts = {t: p for t, p in PROMPTS.items() if t != "t3"}
    res = export_scores(df, prompts, tmp_path / "a.jsonl", method="mc", format="jsonl")
    assert res.n_written == 2


def test_duplicate_segments_are_an_error(tmp_path):
    df = score_table(("mc",), shuffle=False)
    df = pd.concat([df, df[(df["trace_id"] == "t2") & (df["segment"] == 1)]])
    with pytest.raises(UserError) as e:
        export_scores(df, PROMPTS, tmp_path / "a.jsonl")
    assert str(e.value) == ("trace 't2': segment 1 of 'mc' appears more than once; remove the "
                            "duplicated rows")
    # The same segment under another method is no duplicate.
    export_scores(score_table(), PROMPTS, tmp_path / "a.jsonl", method="mc", format="jsonl")


def test_empty_table_missing_columns_and_bad_format(tmp_path):
    df = score_table()
    with pytest.raises(UserError, match="the score table is empty; there is nothing to export"):
        export_scores(df.iloc[0:0], PROMPTS, tmp_path / "a.jsonl")
    with pytest.raises(UserError, match=r"the score table lacks column\(s\) score, text"):
        export_scores(df.drop(columns=["score", "text"]), PROMPTS, tmp_path / "a.jsonl")
    with pytest.raises(UserError, match="unknown export format 'csv'; choose one of "
                                        "processbench, openrlhf-prm, step-rewards, jsonl"):
        export_scores(df, PROMPTS, tmp_path / "a.jsonl", format="csv", method="mc")
    assert not (tmp_path / "a.jsonl").exists()


def test_numeric_trace_ids_match_string_prompts(tmp_path):
    df = score_table(("rredcot",), shuffle=False)
    df["trace_id"] = df["trace_id"].str[1:].astype(int)  # 1, 2, 3
    prompts = {str(i): PROMPTS[f"t{i}"] for i in (1, 2, 3)}
    export_scores(df, prompts, tmp_path / "a.jsonl", format="jsonl")
    assert [r["trace_id"] for r in read_lines(tmp_path / "a.jsonl")] == ["1", "2", "3"]


def test_unwritable_output_is_a_user_error(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(UserError) as e:
        export_scores(score_table(), PROMPTS, tmp_path / "taken", method="mc")
    assert str(e.value).startswith(f"{tmp_path / 'taken'}: cannot write (")
    assert [p.name for p in tmp_path.iterdir()] == ["taken"]
