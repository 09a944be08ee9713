"""Loss-free, resumable runs: killed processes, resume keys, shard merging, numerics, memory.

The kill tests run the real command line in a subprocess on a tiny random Llama saved to disk,
stop it mid-way with a signal and check that the output holds only whole traces and that the
same command resumes. Everything else runs in-process on the session's tiny model.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from conftest import run_cli, write_traces

from cotcredit.errors import UserError
from cotcredit.lm import ModelOptions, load_scorer
from cotcredit.store.io import read_metadata
from cotcredit.store.tables import NonFiniteScore, TableWriter

N_TRACES = 48




@pytest.fixture
def cli_env(tmp_path):
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        COTCREDIT_CACHE=str(tmp_path / "cache"),
        OMP_NUM_THREADS="1",  # one thread: steady per-trace time on a busy machine
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def _sigint_as_in_a_terminal() -> None:
    # A suite started in the background (nohup, `&`) passes SIGINT on as ignored; the run under
    # test should see Ctrl-C as a terminal delivers it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(args, env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cotcredit", *map(str, args)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_as_in_a_terminal,
    )


def wait_for_traces(proc: subprocess.Popen, path: Path, at_least: int, timeout: float = 180):
    """Poll until `path` holds `at_least` traces; fail if the run ends or hangs first."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"run ended (rc {proc.returncode}) before it could be stopped:\n{err}")
        if path.exists():
            try:
                n = len(set(pq.read_table(path, columns=["trace_id"]).column(0).to_pylist()))
            except (OSError, pa.ArrowException):  # a folder mid-compaction or a file mid-rename
                n = 0
            if n >= at_least:
                return
        time.sleep(0.005)
    proc.kill()
    pytest.fail("the run wrote nothing in time")


def assert_whole_traces(df: pd.DataFrame) -> None:
    """Every trace's segments are 0..K-1, once each, and tile its reasoning from char 0."""
    for tid, g in df.groupby("trace_id"):
        g = g.sort_values("segment")
        assert list(g.segment) == list(range(len(g))), f"trace {tid} is not whole"
        assert g.char_start.iloc[0] == 0
        assert (g.char_start.iloc[1:].values == g.char_end.iloc[:-1].values).all()


@pytest.mark.subprocess
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_killed_run_keeps_whole_traces_and_resumes(tiny_model_dir, tmp_path, cli_env, sig):
    """Named guarantee: a killed run leaves a readable file of whole traces; a rerun resumes."""
    traces = write_traces(tmp_path / "traces.jsonl", N_TRACES)
    out = tmp_path / "seg.parquet"
    args = ["segment", traces, "--model", tiny_model_dir, "-o", out, "-k", "4"]
    proc = start([*args, "-q"], cli_env)
    wait_for_traces(proc, out, at_least=3)
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == -sig

    partial = pd.read_parquet(out)
    done = set(partial.trace_id)
    assert 3 <= len(done) < N_TRACES, len(done)
    assert_whole_traces(partial)
    assert (partial.groupby("trace_id").size() == 4).all()
    if sig != signal.SIGKILL:
        return

    # Same command again: scores only the missing traces; every trace exactly once.
    rerun = subprocess.run(
        [sys.executable, "-m", "cotcredit", *map(str, args)],
        env=cli_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert f"{N_TRACES - len(done)} trace(s) scored, {len(done)} already done" in rerun.stderr
    final = pd.read_parquet(out)
    assert sorted(set(final.trace_id)) == [f"tr{i:03d}" for i in range(N_TRACES)]
    assert not final.duplicated(["trace_id", "segment"]).any()
    assert_whole_traces(final)
    # Finished traces were kept as they were, not rescored.
    key = ["trace_id", "segment"]
    before = partial.sort_values(key).reset_index(drop=True)
    after = final[final.trace_id.isin(done)].sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(before, after)
    assert not list(tmp_path.glob(".seg.parquet.*.tmp")), "stale temp file left behind"


@pytest.mark.subprocess
def test_sigint_exits_130_with_message_and_intact_file(tiny_model_dir, tmp_path, cli_env):
    """Named guarantee: Ctrl-C stops with status 130, says how to resume, keeps whole traces."""
    traces = write_traces(tmp_path / "traces.jsonl", N_TRACES)
    out = tmp_path / "rr.parquet"
    proc = start(
        ["redistribute", traces, "--model", tiny_model_dir, "-o", out, "-k", "4", "-q"], cli_env
    )
    wait_for_traces(proc, out, at_least=2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err and "Traceback" not in err
    df = pd.read_parquet(out)
    assert 2 <= df.trace_id.nunique() < N_TRACES
    assert_whole_traces(df)
    assert (df.method == "rredcot").all() and df.score.notna().all()
    assert not list(tmp_path.glob(".rr.parquet.*.tmp"))


# ---- resume key ----------------------------------------------------------------------------


@pytest.fixture
def small_traces(tmp_path):
    return write_traces(tmp_path / "small.jsonl", 3)


@pytest.mark.parametrize(
    "change",
    [
        ["-k", "2"],
        ["--merge", "boundary"],
        ["--keywords", "Wait,So"],
        ["--min-tokens", "2"],
        ["--max-tokens", "40"],
        ["--dtype", "bfloat16"],
        ["--no-chat-template"],
        ["--system-prompt", "Be brief."],
        ["--truncate"],
        ["--prompt-field", "prompt"],
        ["--value", "rhat"],
        ["--solution-part", "whole"],
        ["--vhat-weight", "0.5"],
        ["--space", "log"],
        ["--sum-to", "advantage"],
        ["--length-norm"],
        ["--exit-string", "\nAnswer: "],
        ["--answer-terminator", ""],
        ["--connector", " "],
    ],
)
def test_resume_refuses_other_options(tiny_model_dir, small_traces, tmp_path, capsys, change):
    """Named guarantee: every option that changes results is in the run key; a different one is
    refused in one line (exit 2) and --overwrite replaces the file."""
    out = tmp_path / "rr.parquet"
    base = ["redistribute", small_traces, "--model", tiny_model_dir, "-o", out, "-k", "3", "-q"]
    code, _, err = run_cli([*base, "--max-traces", "1"], capsys)
    assert code == 0, err
    code, _, err = run_cli([*base, *change], capsys)
    assert code == 2 and "holds results of a different run" in err, err
    assert err.strip().count("\n") == 0 and "Traceback" not in err
    assert pd.read_parquet(out).trace_id.nunique() == 1  # untouched


def test_overwrite_replaces_a_different_run(tiny_model_dir, small_traces, tmp_path, capsys):
    out = tmp_path / "rr.parquet"
    base = ["redistribute", small_traces, "--model", tiny_model_dir, "-o", out, "-q"]
    assert run_cli([*base, "-k", "3", "--max-traces", "1"], capsys)[0] == 0
    old = read_metadata(out)["run_id"]
    code, _, err = run_cli([*base, "-k", "2", "--overwrite"], capsys)
    assert code == 0, err
    df = pd.read_parquet(out)
    assert df.trace_id.nunique() == 3 and (df.groupby("trace_id").size() == 2).all()
    assert (df.run_id == read_metadata(out)["run_id"]).all() and df.run_id[0] != old


@pytest.mark.parametrize(
    "same", [["--shard", "0/1"], ["--on-error", "skip"], ["--max-traces", "2"], ["--quiet"]]
)
def test_resume_accepts_options_that_do_not_change_results(
    tiny_model_dir, small_traces, tmp_path, capsys, same
):
    out = tmp_path / "seg.parquet"
    base = ["segment", small_traces, "--model", tiny_model_dir, "-o", out, "-k", "3"]
    assert run_cli([*base, "--max-traces", "1"], capsys)[0] == 0
    code, _, err = run_cli([*base, *same], capsys)
    assert code == 0, err
    assert pd.read_parquet(out).trace_id.nunique() == (2 if "--max-traces" in same else 3)


def test_run_key_follows_model_content_not_path(
    tiny_model_dir, small_traces, tmp_path, capsys, monkeypatch
):
    """The same model in another folder (another machine) resumes; other weights in the same
    folder (a checkpoint retrained in place) are refused."""
    from conftest import build_tiny_model_dir

    import cotcredit.lm.scorer as lm

    out = tmp_path / "seg.parquet"
    copy = tmp_path / "copy-of-model"
    shutil.copytree(tiny_model_dir, copy)
    base = ["segment", small_traces, "-o", out, "-k", "3", "-q"]
    assert run_cli([*base, "--model", tiny_model_dir, "--max-traces", "2"], capsys)[0] == 0
    code, _, err = run_cli([*base, "--model", copy], capsys)
    assert code == 0, err
    assert pd.read_parquet(out).trace_id.nunique() == 3
    monkeypatch.setattr(lm, "_LOADED", {})  # a new process would load the new weights
    build_tiny_model_dir(copy, seed=1)
    code, _, err = run_cli([*base, "--model", copy], capsys)
    assert code == 2 and "different run" in err


@pytest.mark.subprocess
def test_stale_temp_files_of_dead_writers_are_removed(tmp_path):
    out = tmp_path / "t.parquet"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    stale = tmp_path / f".t.parquet.{dead}.tmp"
    stale.write_bytes(b"half a parquet file")
    alive = tmp_path / f".t.parquet.{os.getppid()}.tmp"  # a live process: not ours to delete
    alive.write_bytes(b"x")
    TableWriter(out, {"run_id": "k"})
    assert not stale.exists() and alive.exists()


# ---- merge ---------------------------------------------------------------------------------


def test_merge_shards_equals_unsharded_run(tiny_model_dir, tmp_path, capsys):
    """Named guarantee: `merge` of --shard 0/2 and 1/2 equals one unsharded run."""
    traces = write_traces(tmp_path / "t.jsonl", 6)
    common = ["--model", tiny_model_dir, "-k", "3", "-q"]
    parts = []
    for i in range(2):
        parts.append(tmp_path / f"s{i}.parquet")
        code, _, err = run_cli(
            ["redistribute", traces, "-o", parts[-1], "--shard", f"{i}/2", *common], capsys
        )
        assert code == 0, err
    full = tmp_path / "full.parquet"
    assert run_cli(["redistribute", traces, "-o", full, *common], capsys)[0] == 0
    merged = tmp_path / "merged.parquet"
    code, _, err = run_cli(["merge", *parts, "-o", merged], capsys)
    assert code == 0, err
    assert "merged 2 file(s): 6 trace(s)" in err

    key = ["trace_id", "segment"]
    a = pd.read_parquet(merged).sort_values(key).reset_index(drop=True)
    b = pd.read_parquet(full).sort_values(key).reset_index(drop=True)
    assert {len(pd.read_parquet(p)) for p in parts} != {0}  # both shards hold traces
    pd.testing.assert_frame_equal(a, b)
    meta, shard_meta = read_metadata(merged), read_metadata(parts[0])
    assert meta["run_id"] == shard_meta["run_id"] == read_metadata(full)["run_id"]
    assert meta["segmentation"] == shard_meta["segmentation"] and meta["methods"]
    assert [m["file"] for m in meta["merged_from"]] == [str(p) for p in parts]
    assert [m["shard"] for m in meta["merged_from"]] == ["0/2", "1/2"]
    # The merged table is a normal output: the unsharded command resumes it.
    code, _, err = run_cli(
        ["redistribute", traces, "-o", merged, "--model", tiny_model_dir, "-k", "3"], capsys
    )
    assert code == 0 and "0 trace(s) scored, 6 already done" in err


def test_merge_refuses_mixed_runs_and_duplicates(tiny_model_dir, tmp_path, capsys):
    traces = write_traces(tmp_path / "t.jsonl", 4)
    s0, s1, other, full = (tmp_path / f"{n}.parquet" for n in ("s0", "s1", "other", "full"))
    common = ["--model", tiny_model_dir, "-q"]
    run_cli(["segment", traces, "-o", s0, "--shard", "0/2", "-k", "3", *common], capsys)
    run_cli(["segment", traces, "-o", s1, "--shard", "1/2", "-k", "3", *common], capsys)
    run_cli(["segment", traces, "-o", other, "--shard", "1/2", "-k", "4", *common], capsys)
    run_cli(["segment", traces, "-o", full, "-k", "3", *common], capsys)
    out = tmp_path / "m.parquet"

    def refused(argv, *needles):
        code, _, err = run_cli(["merge", *argv], capsys)
        assert code == 2, err
        assert err.strip().count("\n") == 0 and "Traceback" not in err
        for n in needles:
            assert n in err, err
        assert not out.exists()

    refused([s0, other, "-o", out], str(s0), str(other), "different runs")
    refused([s0, full, "-o", out], str(s0), str(full), "both hold trace")
    refused([s0, s0, "-o", out], "given twice")
    refused([s0, traces, "-o", out], str(traces), "not a readable Parquet file")
    refused([s0, tmp_path / "nope.parquet", "-o", out], "no such file")
    code, _, err = run_cli(["merge", s0, "-o", out], capsys)
    assert code == 0 and "shard(s) 1 of 2 are not among the inputs" in err
    refused2 = run_cli(["merge", s0, s1, "-o", out], capsys)
    assert refused2[0] == 2 and "exists" in refused2[2]
    assert run_cli(["merge", s0, s1, "-o", out, "--overwrite"], capsys)[0] == 0
    assert pd.read_parquet(out).trace_id.nunique() == 4


# ---- numerics ------------------------------------------------------------------------------


def test_nan_score_is_refused_naming_trace_and_method(tmp_path):
    """Named guarantee: a NaN or infinite score never reaches a table silently."""
    out = tmp_path / "t.parquet"
    w = TableWriter(out, {"run_id": "k"})
    row = {"run_id": "k", "trace_id": "a", "segment": 0, "method": "rredcot", "score": 0.5}
    w.append([row])
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(NonFiniteScore) as exc:
            w.append([{**row, "trace_id": "b", "score": bad}])
        msg = str(exc.value)
        assert "trace 'b'" in msg and "method 'rredcot'" in msg and "\n" not in msg
        assert isinstance(exc.value, UserError)
    import numpy as np

    with pytest.raises(NonFiniteScore):  # numpy scalars too (np.float32 is no Python float)
        w.append([{**row, "trace_id": "b", "score": np.float32("nan")}])
    assert list(pd.read_parquet(out).trace_id) == ["a"]
    # A method that explains a missing value (score_note) may write NaN.
    w.append([{**row, "trace_id": "c", "score": math.nan, "score_note": "all rollouts cut off"}])


def test_nan_from_a_method_stops_or_skips_the_trace(
    tiny_model_dir, traces_file, tmp_path, capsys, monkeypatch
):
    from cotcredit.methods import registry

    spec = registry()["rredcot"]

    def poisoned(ctx, options):
        rows = spec.run(ctx, options)
        if ctx.trace.id == "t2":
            rows["rredcot"][1]["score"] = float("nan")
        return rows

    monkeypatch.setitem(registry(), "rredcot", dataclasses.replace(spec, run=poisoned))
    out = tmp_path / "rr.parquet"
    argv = ["redistribute", traces_file, "--model", tiny_model_dir, "-o", out, "-k", "3", "-q"]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and "Traceback" not in err and err.strip().count("\n") == 0
    assert "non-finite score (nan) for trace 't2', method 'rredcot', segment 1" in err
    assert set(pd.read_parquet(out).trace_id) == {"t1"}  # finished work kept
    code, _, err = run_cli([*argv, "--on-error", "skip"], capsys)
    assert code == 0 and "skipped 1 trace(s)" in err and "trace 't2'" in err
    df = pd.read_parquet(out)
    assert set(df.trace_id) == {"t1", "t3"} and df.score.map(math.isfinite).all()


def test_bfloat16_scores_in_float32_close_to_float32(tiny_model_dir, scorer):
    """Named guarantee: half-precision runs compute log-softmax in float32."""
    from conftest import SAMPLE_TRACES

    from cotcredit.data.traces import parse_trace
    from cotcredit.lm import Continuation

    for dtype in ("bfloat16", "float16"):
        half = load_scorer(ModelOptions(model=str(tiny_model_dir), dtype=dtype, device="cpu"))
        assert half.dtype == getattr(torch, dtype)
        for n, raw in enumerate(SAMPLE_TRACES[:2], start=1):
            enc = scorer.encode(parse_trace(raw, "mem", n))
            a, b = scorer.forward(enc.ids), half.forward(enc.ids)
            assert b.logprobs.dtype == torch.float32 and torch.isfinite(b.logprobs).all()
            assert torch.isfinite(b.entropies).all()
            assert (a.logprobs - b.logprobs).abs().max() < 0.1
            assert (a.entropies - b.entropies).abs().max() < 0.1
            conts = [
                Continuation(p, enc.ids[p : p + 4])
                for p in range(enc.prompt_len, len(enc.ids) - 4, 5)
            ]
            for x, y in zip(
                scorer.score_continuations(a, conts), half.score_continuations(b, conts)
            ):
                assert math.isfinite(y.logprob) and abs(x.logprob - y.logprob) < 0.1
        h = half.model.get_decoder()(input_ids=torch.tensor([enc.ids])).last_hidden_state[0]
        assert h.dtype == getattr(torch, dtype) and half.head_logits(h).dtype == torch.float32


# ---- memory --------------------------------------------------------------------------------


def _probe_setup(scorer):
    from conftest import SAMPLE_TRACES

    from cotcredit.data.traces import parse_trace
    from cotcredit.lm import Continuation

    enc = scorer.encode(parse_trace(SAMPLE_TRACES[0], "mem", 1))
    conts = [Continuation(p, enc.ids[p : p + 6]) for p in range(enc.prompt_len, len(enc.ids) - 6)]
    return enc, conts


@pytest.mark.parametrize(
    "error",
    [
        lambda: torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        lambda: RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"),
    ],
)
def test_out_of_memory_halves_the_packed_pass_and_retries(scorer, error):
    """Named guarantee: on out-of-memory the probe batch halves and the group is retried."""
    enc, conts = _probe_setup(scorer)
    reference = scorer.score_continuations(scorer.forward(enc.ids), conts)

    s = scorer.with_options(scorer.options)
    s.query_budget = 256
    real = s._decoder()
    calls = {"packed": 0}

    def flaky(**kw):
        if kw.get("attention_mask") is not None:
            calls["packed"] += 1
            if calls["packed"] == 1:
                real(**kw)  # the pass ran (the cache grew), then memory ran out
                raise error()
        return real(**kw)

    s._decoder = lambda: flaky
    base = s.forward(enc.ids)
    got = s.score_continuations(base, conts)
    assert s.query_budget == 128 and scorer.query_budget != 128
    assert calls["packed"] > 2
    assert base.cache.get_seq_length() == len(enc.ids)  # probe tokens cropped again
    for x, y in zip(reference, got):
        assert abs(x.logprob - y.logprob) < 1e-4
    # The cache is still right for the next call.
    again = s.score_continuations(base, conts[:5])
    assert [round(r.logprob, 4) for r in again] == [round(r.logprob, 4) for r in reference[:5]]


def test_out_of_memory_at_the_smallest_pass_is_one_clear_error(scorer):
    enc, conts = _probe_setup(scorer)
    s = scorer.with_options(scorer.options)
    s.query_budget = 256

    def always(**kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory.")

    base = s.forward(enc.ids)
    s._decoder = lambda: always
    with pytest.raises(UserError, match="out of memory scoring probes even with 64") as exc:
        s.score_continuations(base, conts)
    assert "\n" not in str(exc.value) and s.query_budget == 64


def test_other_runtime_errors_are_not_retried(scorer):
    enc, conts = _probe_setup(scorer)
    s = scorer.with_options(scorer.options)
    budget = s.query_budget

    def broken(**kw):
        raise RuntimeError("shape mismatch")

    base = s.forward(enc.ids)
    s._decoder = lambda: broken
    with pytest.raises(RuntimeError, match="shape mismatch"):
        s.score_continuations(base, conts)
    assert s.query_budget == budget


def test_out_of_memory_halves_the_sequence_batch(scorer):
    """score_sequences (perturbed traces for attribution) halves its batch on out-of-memory."""
    enc, _ = _probe_setup(scorer)
    seqs = [enc.ids[:n] for n in range(enc.prompt_len + 4, len(enc.ids), 3)]
    lens = [3] * len(seqs)
    reference = scorer.score_sequences(seqs, lens, batch_size=8)
    s = scorer.with_options(scorer.options)
    real = s._decoder()
    sizes = []

    def small_memory(**kw):
        sizes.append(kw["input_ids"].shape[0])
        if kw["input_ids"].shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory.")
        return real(**kw)

    s._decoder = lambda: small_memory
    got = s.score_sequences(seqs, lens, batch_size=8)
    assert sizes[:3] == [8, 4, 2] and max(sizes[3:]) <= 2
    assert got == pytest.approx(reference, abs=1e-4)

    def never(**kw):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory.")

    s._decoder = lambda: never
    with pytest.raises(UserError, match="out of memory scoring one sequence"):
        s.score_sequences(seqs[:2], lens[:2], batch_size=2)
