"""Analysis under a launcher: `torchrun --nproc-per-node 2` (gloo on CPU) on the tiny model.

Each launch runs the real command line in two processes with a real process group; the table it
leaves must equal a single-process run's row for row (same rows, same order), the summary must
be printed once, and a later run with another number of processes must resume it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from conftest import TESTS, run_cli, write_traces

from cotcredit.distributed import Processes
from cotcredit.store import io

N = 8

pytestmark = pytest.mark.subprocess  # torchrun: two Python processes per test


def torchrun(args: list, tmp_path, processes: int = 2) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "COTCREDIT_CACHE": str(tmp_path / "cache"),
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", str(processes), "-m", "cotcredit", *map(str, args)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture
def traces(tmp_path):
    path = write_traces(tmp_path / "t.jsonl", N)
    ids = [f"tr{i:03d}" for i in range(N)]
    # Both processes get traces (the split hashes the id: fixed for these ids).
    assert all(any(Processes(i, 2).takes(t) for t in ids) for i in range(2))
    return path


def test_segment_on_two_processes_equals_one_process(tiny_model_dir, traces, tmp_path, capsys):
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    common = ["--model", tiny_model_dir, "-k", "3"]
    proc = torchrun(["segment", traces, "-o", two, *common], tmp_path)
    # Only the main process reports, for both.
    assert proc.stderr.count("trace(s) scored") == 1, proc.stderr
    assert f"{N} trace(s) scored, 0 already done" in proc.stderr
    assert run_cli(["segment", traces, "-o", one, *common, "-q"], capsys)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(two), pd.read_parquet(one))
    assert len(io.data_files(two)) == 1  # compacted by the main process
    assert io.read_metadata(two)["run_id"] == io.read_metadata(one)["run_id"]


def test_two_process_run_resumed_by_one_process(tiny_model_dir, traces, tmp_path, capsys):
    out, ref = tmp_path / "rr.parquet", tmp_path / "ref.parquet"
    common = ["--model", tiny_model_dir, "-k", "3"]
    torchrun(["redistribute", traces, "-o", out, *common, "--max-traces", "3", "-q"], tmp_path)
    assert sorted(pd.read_parquet(out).trace_id.unique()) == ["tr000", "tr001", "tr002"]
    code, _, err = run_cli(["redistribute", traces, "-o", out, *common], capsys)
    assert code == 0 and f"{N - 3} trace(s) scored, 3 already done" in err, err
    assert run_cli(["redistribute", traces, "-o", ref, *common, "-q"], capsys)[0] == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(ref))


def test_compare_on_two_processes_writes_one_report(
    tiny_model_dir, scorer, traces, tmp_path, capsys
):
    """One process already scored some traces; two processes finish the run; the main one alone
    writes the report, from tables equal to a single-process run's."""
    from cotcredit.report.compare import method_options, run_methods
    from cotcredit.segmentation import SegmentOptions

    report, ref = tmp_path / "report", tmp_path / "ref"
    common = ["--model", tiny_model_dir, "-k", "3", "--methods", "rredcot,loo",
              "--reference", "loo", "--bootstrap", "20", "-q"]
    assert run_cli(["compare", traces, "-o", report, *common, "--max-traces", "2"],
                   capsys)[0] == 0
    (report / "report.html").unlink()
    proc = torchrun(["compare", traces, "-o", report, *common[:-1]], tmp_path)
    assert proc.stderr.count("trace(s) scored") == 1, proc.stderr
    assert f"{N - 2} trace(s) scored, 2 already done" in proc.stderr
    assert (report / "report.html").exists() and (report / "correlations.parquet").exists()
    run_methods(traces, scorer, method_options("rredcot,loo"), ref,
                segment_options=SegmentOptions(segments=3))
    for name in ("segments", "rredcot", "loo"):
        a, b = pd.read_parquet(report / f"{name}.parquet"), pd.read_parquet(ref / f"{name}.parquet")
        pd.testing.assert_frame_equal(a.drop(columns="run_id"), b.drop(columns="run_id"))


TRAIN_CONFIG = """\
model: {model}
train_file: train.jsonl
eval_file: eval.jsonl
output_dir: out
advantage: rredcot
rredcot:
  segments: 3
grpo:
  num_generations: 2
  max_completion_length: 12
  per_device_train_batch_size: 2
  max_steps: {steps}
  save_steps: 2
  learning_rate: 1.0e-3
  gradient_checkpointing: false
  report_to: none
  extra: {{disable_tqdm: true, dataloader_pin_memory: false}}
eval:
  max_new_tokens: 4
"""


def test_training_on_two_processes(tiny_model_dir, tmp_path):
    """Two processes: each scores its own completions, what reaches the loss keeps GRPO's total
    and signs per completion, logs/eval/checkpoints are written once, --resume continues."""
    import json

    from cotcredit.training.metrics import read_metrics

    problems = [{"id": c, "prompt": f"What is {a} + {b}?", "answer": str(a + b)}
                for c, a, b in (("a", 3, 4), ("b", 5, 7), ("c", 2, 2), ("d", 6, 3))]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems[:2]))
    config = tmp_path / "config.yaml"
    launcher = str(TESTS / "launch_train.py")

    def launch(steps: int, *extra: str) -> subprocess.CompletedProcess:
        config.write_text(TRAIN_CONFIG.format(model=tiny_model_dir, steps=steps))
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               "2", launcher, str(config), str(tmp_path), *extra]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc

    launch(2)
    out = tmp_path / "out"
    for rank in (0, 1):
        lines = (tmp_path / f"adv-rank{rank}.jsonl").read_text().splitlines()
        steps = [json.loads(x) for x in lines]
        assert len(steps) == 2 and all(s["world"] == 2 for s in steps)
        rows = [r for s in steps for r in s["rows"]]
        assert any(r["A"] != 0 for r in rows)  # this process scored completions of its own
        for r in rows:
            assert r["sum"] == pytest.approx(r["A"] * r["n"], rel=1e-5, abs=1e-6)
            assert r["signs_ok"] and r["pad_zero"]
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]  # written once
    evaluation = json.loads((out / "eval.json").read_text())
    assert evaluation["after"]["step"] == 2 and evaluation["before"]["problems"] == 2
    assert len((out / "eval_completions.jsonl").read_text().splitlines()) == 4
    assert (out / "checkpoint-2" / "model.safetensors").is_file()

    launch(3, "--resume")
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert json.loads((out / "eval.json").read_text())["after"]["step"] == 3


def test_generate_on_two_processes_writes_each_trace_once(tiny_model_dir, tmp_path, capsys):
    """Launched, each process samples its problems into a part file and the main one appends
    them in problem order: the file one process writes, each trace once, reported once; a
    part left by a killed launch is taken in, not sampled again."""
    import json

    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"id": f"p{i}", "prompt": f"What is {i} + 1?",
                                            "answer": str(i + 1)}) + "\n" for i in range(6)))
    common = ["--model", tiny_model_dir, "-n", "2", "--max-new-tokens", "8", "--seed", "3"]
    two, one = tmp_path / "two.jsonl", tmp_path / "one.jsonl"
    ids = [f"p{i}" for i in range(6)]
    assert all(any(Processes(r, 2).takes(p) for p in ids) for r in range(2))
    proc = torchrun(["generate", problems, "-o", two, *common], tmp_path)
    assert proc.stderr.count("generate ->") == 1, proc.stderr  # one report
    assert run_cli(["generate", problems, "-o", one, *common, "-q"], capsys)[0] == 0
    got, want = two.read_text().splitlines(), one.read_text().splitlines()
    assert [json.loads(x)["id"] for x in got] == [json.loads(x)["id"] for x in want]
    assert got == want  # sample j of a problem is the same in any process and batch
    assert not list(tmp_path.glob(".two.jsonl.part*"))
    # A launch killed after a process wrote its part: the next run takes the part in.
    lines = two.read_text().splitlines(keepends=True)
    two.write_text("".join(lines[:4]))
    (tmp_path / ".two.jsonl.part1").write_text("".join(lines[4:]))
    from cotcredit.pipeline.generate import GenerateOptions, generate_traces

    again = generate_traces(problems, two, model=str(tiny_model_dir),
                            options=GenerateOptions(samples=2, max_new_tokens=8, seed=3))
    assert (again.sampled, again.resumed, again.samples) == (0, 6, 12)
    assert two.read_text().splitlines() == want
