"""The organism's tokenizer, training and checked-in checkpoints, loaded like a user's model."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import FIXTURES, run_cli
from safetensors.torch import load_file

from cotcredit.bench.organism.checker import check_response
from cotcredit.bench.organism.model import build_tokenizer
from cotcredit.bench.organism.task import MAX_VALUE, Chain, reference_solution, split_problems
from cotcredit.bench.organism.train import TrainOptions, encode_example, train_organism
from cotcredit.bench.regimes import checkpoint, get_regime
from cotcredit.bench.regimes.base import Problem
from cotcredit.bench.regimes.unique import chain_meta, chain_of

MODEL_FULL = Path(checkpoint("unique"))  # the organism's `full` checkpoint, shipped as `unique`
C = Chain(7, (("+", 5), ("-", 9), ("+", 14), ("-", 6)))
P = Problem(id="p", prompt=C.prompt, answer=str(C.answer), solution=C.solution,
            meta=chain_meta(C))


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_every_number_is_one_token(tok):
    for v in range(MAX_VALUE + 1):
        for text in (str(v), f" {v}"):
            assert len(tok(text, add_special_tokens=False)["input_ids"]) == 1, text
    ids = tok("The answer is 11", add_special_tokens=False)["input_ids"]
    assert tok.convert_ids_to_tokens(ids)[-1] == "Ġ11"


def test_training_sequences(tok):
    ids, labels = encode_example(tok, P)
    text = tok.decode([t for t in labels if t != -100])
    assert text == reference_solution(C) + tok.eos_token
    # early answer after one step: the loss is on the final answer's token only
    ids, labels = encode_example(tok, P, upto=1)
    assert tok.decode(ids).endswith("7 + 5 = 12\nThe answer is 11.")
    assert [tok.decode([t]) for t in labels if t != -100] == [" 11"]


@pytest.mark.parametrize("regime", ["unique", "multipath"])
def test_training_is_deterministic(tmp_path, regime):
    r = get_regime(regime)
    train, dev = r.problems("train", 200), r.problems("dev", 4)
    opts = TrainOptions(hidden=32, layers=1, heads=2, batch_size=4, max_steps=3, eval_every=3,
                        eval_problems=4, warmup=1, regime=regime, early_fraction=0.5,
                        save_dtype="float16")
    a = train_organism(opts, train, dev, tmp_path / "a", log=lambda _: None)
    b = train_organism(opts, train, dev, tmp_path / "b", log=lambda _: None)
    wa, wb = load_file(str(tmp_path / "a" / "model.safetensors")), load_file(
        str(tmp_path / "b" / "model.safetensors"))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    drop = lambda c: [{k: v for k, v in e.items() if k != "seconds"} for e in c]  # noqa: E731
    assert drop(a["curve"]) == drop(b["curve"]) and a["steps"] == 3


def test_organism_loads_through_model_and_runs_segment_and_redistribute(tmp_path, capsys):
    problems = split_problems({"dev": 3})["dev"]
    traces = tmp_path / "traces.jsonl"
    with open(traces, "w") as f:
        for i, p in enumerate(problems):
            f.write(json.dumps({"id": f"t{i}", "prompt": p.prompt, "response": p.solution,
                                "answer": str(p.answer)}) + "\n")
    model = str(MODEL_FULL)
    k = len(problems[0].steps)
    code, _, err = run_cli(["segment", traces, "-o", tmp_path / "seg", "--model", model,
                            "-k", k, "--max-traces", 1, "-q"], capsys)
    assert code == 0, err
    seg = pd.read_parquet(tmp_path / "seg")
    # with -k = its number of steps, one segment per reasoning line, in order
    lines = problems[0].solution.splitlines(keepends=True)[:k]
    assert list(seg.sort_values("segment").text) == lines
    code, _, err = run_cli(["redistribute", traces, "-o", tmp_path / "r", "--model", model,
                            "-k", k, "--max-traces", 1, "--value", "rhat",
                            "--exit-string", "The answer is ", "-q"], capsys)
    assert code == 0, err
    r = pd.read_parquet(tmp_path / "r")
    assert len(r) == k and r.score.notna().all()
    assert check_response(problems[0], problems[0].solution).correct


def test_forecast_logprob_equals_one_probe_at_a_time(tmp_path):
    """The batched (right-padded) forecast equals scoring each probe text alone, and it is
    grouped by steps still to go."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cotcredit.bench.organism.train import forecast_logprob

    r = get_regime("unique")
    opts = TrainOptions(hidden=32, layers=1, heads=2, batch_size=4, max_steps=2, eval_every=2,
                        eval_problems=2, warmup=1)
    train_organism(opts, r.problems("train", 50), r.problems("dev", 2), tmp_path / "m",
                   log=lambda _: None)
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "m").eval()
    tk = AutoTokenizer.from_pretrained(tmp_path / "m")
    got = forecast_logprob(model, tk, r.problems("dev", 6), batch=5)
    want: dict[int, list[float]] = {}
    for p in (chain_of(x) for x in r.problems("dev", 6)):
        prompt = tk.apply_chat_template([{"role": "user", "content": p.prompt}], tokenize=False,
                                        add_generation_prompt=True)
        for k in range(len(p.steps) + 1):
            head = reference_solution(p, k).rsplit("The answer is ", 1)[0]
            ids = tk(prompt + head + f"The answer is {p.answer}", add_special_tokens=False,
                     return_tensors="pt")["input_ids"]
            with torch.no_grad():
                logp = torch.log_softmax(model(ids).logits[0, -2], -1)[ids[0, -1]].item()
            want.setdefault(len(p.steps) - k, []).append(logp)
    assert sorted(got) == sorted(want)
    for togo, values in want.items():
        assert got[togo] == pytest.approx(sum(values) / len(values), abs=2e-3)


def test_calibration_verdict_of_a_retrain():
    """build --check's calibration rule: accuracy 0.3-0.7, first errors on at least four
    positions, none holding more than 40% of them."""
    from cotcredit.bench.organism import build

    spread = {"1": 21, "2": 67, "3": 60, "4": 25, "5": 8}  # the checked-in model-full
    assert build.meets_calibration({"accuracy": 0.48, "first_error_hist": spread})[0]
    assert not build.meets_calibration({"accuracy": 0.92, "first_error_hist": spread})[0]
    assert not build.meets_calibration({"accuracy": 0.29, "first_error_hist": spread})[0]
    few = {"1": 30, "2": 30, "3": 30, "4": 0}  # three positions
    assert not build.meets_calibration({"accuracy": 0.5, "first_error_hist": few})[0]
    piled = {"1": 41, "2": 20, "3": 20, "4": 19}  # 41% on one position
    ok, why = build.meets_calibration({"accuracy": 0.5, "first_error_hist": piled})
    assert not ok and "41%" in why


def test_segment_lines_reproduces_the_organism_studys_step_segmentation(tmp_path, capsys):
    """`-k lines` gives, on the organism study's traces, exactly the segments the study made
    by running the hybrid segmentation with -k matched to each trace's line count."""
    study = FIXTURES / "organism_study_full"  # the study's first 60 traces
    code, _, err = run_cli(["segment", study / "traces.jsonl", "-o", tmp_path / "seg", "-k",
                            "lines", "--model", MODEL_FULL, "--max-traces", 60,
                            "-q"], capsys)
    assert code == 0, err
    got = pd.read_parquet(tmp_path / "seg")
    want = pd.read_parquet(study / "segments.parquet")
    want = want[want.trace_id.isin(set(got.trace_id))]
    cols = ["trace_id", "segment", "char_start", "char_end", "token_start", "token_end"]
    assert got.trace_id.nunique() == 60
    pd.testing.assert_frame_equal(got.sort_values(cols[:2])[cols].reset_index(drop=True),
                                  want.sort_values(cols[:2])[cols].reset_index(drop=True),
                                  check_dtype=False)
