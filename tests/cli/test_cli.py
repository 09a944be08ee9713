"""CLI end to end on a tiny model: outputs, resume, refusal of mixed runs, one-line errors."""

import json

import pandas as pd
import pytest
from conftest import run_cli

from cotcredit.store.io import read_metadata

run = run_cli


def test_segment_end_to_end_and_resume(tiny_model_dir, traces_file, tmp_path, capsys):
    out = tmp_path / "seg.parquet"
    code, stdout, stderr = run(["segment", traces_file, "--model", tiny_model_dir, "-o", out,
                                "-k", "3", "--show", "t2", "-q"], capsys)
    assert code == 0, stderr
    df = pd.read_parquet(out)
    assert list(df.columns[:9]) == ["trace_id", "segment", "char_start", "char_end", "token_start",
                                    "token_end", "n_tokens", "text", "boundary_entropy"
                                    ] or "run_id" in df.columns
    assert df.groupby("trace_id").size().to_dict() == {"t1": 3, "t2": 3, "t3": 3}
    meta = read_metadata(out)
    assert meta["segmentation"]["segments"] == 3 and meta["cotcredit_version"]
    assert (df.run_id == meta["run_id"]).all()
    assert "trace t2" in stdout
    # Rerun: nothing new, nothing duplicated.
    code, _, stderr = run(["segment", traces_file, "--model", tiny_model_dir, "-o", out, "-k", "3"],
                          capsys)
    assert code == 0 and "0 trace(s) scored, 3 already done" in stderr
    assert len(pd.read_parquet(out)) == len(df)
    # Other options into the same file: refused with one line.
    code, _, stderr = run(["segment", traces_file, "--model", tiny_model_dir, "-o", out, "-k", "2"],
                          capsys)
    assert code == 2 and "holds results of a different run" in stderr and stderr.count("\n") == 1


def test_resume_after_partial_run(tiny_model_dir, traces_file, tmp_path, capsys):
    out = tmp_path / "rr.parquet"
    code, _, err = run(["redistribute", traces_file, "--model", tiny_model_dir, "-o", out,
                        "-k", "3", "--max-traces", "1"], capsys)
    assert code == 0, err
    assert set(pd.read_parquet(out).trace_id) == {"t1"}
    code, _, err = run(["redistribute", traces_file, "--model", tiny_model_dir, "-o", out,
                        "-k", "3"], capsys)
    assert code == 0 and "2 trace(s) scored, 1 already done" in err
    df = pd.read_parquet(out)
    assert df.groupby("trace_id").size().to_dict() == {"t1": 3, "t2": 3, "t3": 3}
    assert (df.method == "rredcot").all()


def test_redistribute_reuses_segmentation(tiny_model_dir, traces_file, tmp_path, capsys):
    seg = tmp_path / "seg.parquet"
    run(["segment", traces_file, "--model", tiny_model_dir, "-o", seg, "-k", "4"], capsys)
    rr = tmp_path / "rr.parquet"
    code, _, err = run(["redistribute", traces_file, "--model", tiny_model_dir, "-o", rr,
                        "--segments-file", seg], capsys)
    assert code == 0, err
    a, b = pd.read_parquet(seg), pd.read_parquet(rr)
    cols = ["trace_id", "segment", "char_start", "char_end", "token_start", "token_end", "text"]
    assert a[cols].equals(b[cols])


@pytest.mark.parametrize(
    "lines, argv, message",
    [
        # (segment needs no reference answer: a missing one is refused by the scoring commands)
        (['{"prompt": "Q", "answer": "1"}'], [],
         "traces.jsonl:1: missing response (tried response, completion, generation, output, "
         "generations, messages, conversations, steps)"),
        (["{oops"], [], "traces.jsonl:1: invalid JSON"),
        ([], ["--segments", "0"], "--segments must be at least 1"),
        ([], ["--merge", "x"], "--merge must be one of pair, boundary"),
        ([], ["--shard", "3/2"], "--shard 3/2: need 0 <= i < n"),
        ([], ["--model", "/nonexistent/model.gguf"],
         "--model: no such folder or file: /nonexistent/model.gguf"),
        ([], ["--model", "./no/such/folder"], "--model: no such folder or file: ./no/such/folder"),
        ([], ["--model", "~/no-such-model"], "--model: no such folder or file: ~/no-such-model"),
    ],
)
def test_bad_input_one_line_exit_2(tiny_model_dir, tmp_path, capsys, lines, argv, message):
    p = tmp_path / "traces.jsonl"
    good = json.dumps({"prompt": "Q?", "response": "Think.\nAnswer: 1", "answer": "1"})
    p.write_text("\n".join(lines or [good]) + "\n")
    model = [] if "--model" in argv else ["--model", tiny_model_dir]
    code, _, err = run(["segment", p, "-o", tmp_path / "o.parquet", *model, *argv], capsys)
    assert code == 2
    assert message in err and "Traceback" not in err
    assert err.strip().count("\n") == 0


def test_on_error_skip_reports_and_continues(tiny_model_dir, traces_file, tmp_path, capsys):
    p = tmp_path / "mixed.jsonl"
    p.write_text(traces_file.read_text() + "{broken\n" + '{"prompt": "x"}\n')
    code, _, err = run(["segment", p, "--model", tiny_model_dir, "-o", tmp_path / "o.parquet",
                        "--on-error", "skip"], capsys)
    assert code == 0
    assert "skipped 2 trace(s)" in err and "mixed.jsonl:4: invalid JSON" in err
    assert set(pd.read_parquet(tmp_path / "o.parquet").trace_id) == {"t1", "t2", "t3"}


def test_shards_partition_traces(tiny_model_dir, traces_file, tmp_path, capsys):
    ids = []
    for i in range(2):
        out = tmp_path / f"s{i}.parquet"
        run(["segment", traces_file, "--model", tiny_model_dir, "-o", out, "--shard", f"{i}/2"],
            capsys)
        ids += list(pd.read_parquet(out).trace_id.unique())
    assert sorted(ids) == ["t1", "t2", "t3"]


def test_python_api_matches_cli(tiny_model_dir, traces_file, tmp_path, capsys):
    import cotcredit
    from cotcredit.segmentation import SegmentOptions

    df = cotcredit.segment(traces_file, model=tiny_model_dir,
                           options=SegmentOptions(segments=3)).frame()
    out = tmp_path / "s.parquet"
    run(["segment", traces_file, "--model", tiny_model_dir, "-o", out, "-k", "3"], capsys)
    cli = pd.read_parquet(out)
    assert df[["trace_id", "segment", "text"]].equals(cli[["trace_id", "segment", "text"]])


def test_python_api_methods_equal_cli_rows(tiny_model_dir, traces_file, tmp_path, capsys):
    import cotcredit

    api = cotcredit.attribute(traces_file, methods=["loo"], model=tiny_model_dir).frame()
    out = tmp_path / "attr.parquet"
    code, _, err = run(["attribute", traces_file, "--method", "loo", "--model", tiny_model_dir,
                        "-o", out, "-q"], capsys)
    assert code == 0, err
    cli = pd.read_parquet(out)
    assert api.score.tolist() == pytest.approx(cli.score.tolist(), abs=1e-9)


def test_the_user_session_as_typed(tiny_model_dir, traces_file, tmp_path, capsys, monkeypatch):
    """The session researchers describe, typed as is (plus --model): per-method commands with
    their defaults, then `compare --methods rredcot,mc,loo` with no inputs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.jsonl").write_text(traces_file.read_text())
    model = ["--model", str(tiny_model_dir)]
    for argv in (
        ["segment", "trace.jsonl"],
        ["redistribute", "trace.jsonl"],
        ["mc-baseline", "trace.jsonl"],
        ["attribute", "trace.jsonl", "--method", "loo"],
    ):
        code, _, err = run([*argv, *model], capsys)
        assert code == 0, (argv, err)
    code, stdout, err = run(["compare", "--methods", "rredcot,mc,loo"], capsys)
    assert code == 0, err
    for line in ("rredcot: rredcot.parquet", "mc: mc.parquet", "loo: attr.parquet"):
        assert line in err
    assert "Agreement with mc" in stdout and "report: report/report.html" in err
    # Every command segmented the same way, deterministically.
    spans = ["trace_id", "segment", "char_start", "char_end"]
    seg = pd.read_parquet("segments.parquet")[spans]
    for table in ("rredcot.parquet", "mc.parquet", "attr.parquet"):
        pd.testing.assert_frame_equal(pd.read_parquet(table)[spans], seg)
    corr = pd.read_parquet("report/correlations.parquet")
    assert {"rredcot", "loo"} <= set(corr.method_a) | set(corr.method_b)
    # The random model never answers: MC values are all 0, counted as skipped, not dropped.
    assert "| mc | loo | constant scores |" in (tmp_path / "report" / "report.md").read_text()
    for name in ("report.md", "report.html", "report.tex", "heatmap.png", "heatmap.pdf"):
        assert (tmp_path / "report" / name).is_file(), name


def test_cli_defaults_and_help_are_the_dataclasses():
    """No option of any command has a default or help text of its own: both come from the
    options dataclass field it sets (tuple fields: None on the command line, the default kept)."""
    import dataclasses

    import typer

    from cotcredit.bench.run import BenchOptions
    from cotcredit.cli import app
    from cotcredit.data.problems import ProblemInputOptions
    from cotcredit.lm import ModelOptions
    from cotcredit.methods import registry
    from cotcredit.options import params_of
    from cotcredit.pipeline.export import ExportOptions
    from cotcredit.pipeline.generate import GenerateOptions
    from cotcredit.pipeline.run import InputOptions
    from cotcredit.report.compare import ReportOptions, Shortcuts
    from cotcredit.segmentation import SegmentOptions

    classes = [InputOptions, ModelOptions, SegmentOptions, ReportOptions, Shortcuts,
               ExportOptions, GenerateOptions, ProblemInputOptions,
               *(s.options_type for s in registry().values())]
    declared: dict[str, list] = {}
    for cls in classes:
        for p in params_of(cls):
            declared.setdefault(p.flag.split("/")[0], []).append(p)
    # bench's options are its own dataclass's (its --seed, --overwrite are not the others')
    own = {"bench": {p.flag.split("/")[0]: [p] for p in params_of(BenchOptions)}}
    classes.append(BenchOptions)
    group = typer.main.get_group(app)
    checked = 0
    for command in group.commands.values():
        if command.name == "train":  # its options are the YAML config's (training/config.py)
            continue
        flags = own.get(command.name, declared)
        for param in command.params:
            flag = next((o for o in param.opts if o.startswith("--")), None)
            if flag not in flags or (command.name, flag) == ("attribute", "--method"):
                continue  # (attribute's own --method lists methods; export's picks one)
            assert any(param.default == p.default and param.help == p.help
                       for p in flags[flag]), (command.name, flag)
            checked += 1
    assert checked > 100
    # And every field of every options class documents itself.
    for cls in classes:
        for f in dataclasses.fields(cls):
            assert f.name == "fields" or f.metadata.get("help"), (cls.__name__, f.name)


def test_help_shows_the_choices_of_every_option_that_has_them(capsys):
    """`--merge pair|boundary`, not `--merge <str>`: for every command, every option whose field
    declares choices shows them as its metavar in --help."""
    import typer

    from cotcredit.bench.run import BenchOptions
    from cotcredit.cli import app
    from cotcredit.data.problems import ProblemInputOptions
    from cotcredit.lm import ModelOptions
    from cotcredit.methods import registry
    from cotcredit.options import params_of
    from cotcredit.pipeline.export import ExportOptions
    from cotcredit.pipeline.generate import GenerateOptions
    from cotcredit.pipeline.run import InputOptions
    from cotcredit.report.compare import ReportOptions
    from cotcredit.segmentation import SegmentOptions

    classes = [InputOptions, ModelOptions, SegmentOptions, ReportOptions, ExportOptions,
               GenerateOptions, ProblemInputOptions, BenchOptions,
               *(s.options_type for s in registry().values())]
    choices: dict[str, list] = {}  # flag -> the choices of each class declaring it
    for cls in classes:
        for p in params_of(cls):
            if p.choices and p.choices not in choices.get(p.flag, []):
                choices.setdefault(p.flag, []).append(p.choices)
    assert {"--merge", "--dtype", "--on-error", "--truncated", "--format"} <= set(choices)
    checked = 0
    for name, command in typer.main.get_group(app).commands.items():
        code, stdout, _ = run_cli([name, "--help"], capsys)
        assert code == 0
        help_text = " ".join(stdout.split())  # click wraps long lines
        for param in command.params:
            flag = next((o for o in param.opts if o in choices), None)
            if flag:
                shown = any(f"{flag} {'|'.join(c)}" in help_text for c in choices[flag])
                assert shown, (name, flag)
                checked += 1
    assert checked >= 20
    code, stdout, _ = run_cli(["segment", "--help"], capsys)
    assert "--merge pair|boundary" in stdout and "--merge <str>" not in stdout


BAD_THIRD_LINE = [
    {"id": "a", "prompt": "Q?", "response": "Think.\nAnswer: 1", "answer": "1"},
    {"id": "b", "prompt": "Q?", "response": "Think.\nAnswer: 2", "answer": "2"},
    {"id": "c", "prompt": "Q?"},  # no response (traces) and no reference answer (problems)
]


@pytest.mark.parametrize("argv", [
    ["segment", "F"], ["redistribute", "F"], ["mc-baseline", "F"],
    ["attribute", "F", "--method", "loo"], ["compare", "F", "--methods", "rredcot,loo"],
    ["generate", "F"], ["train", "CONFIG"],
])
def test_a_bad_input_line_costs_no_model_load(tmp_path, capsys, monkeypatch, argv):
    """The whole input is read before the model loads: a bad third line fails at once."""
    import cotcredit.lm
    import cotcredit.training.run

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the input was checked")

    monkeypatch.setattr(cotcredit.lm, "load_scorer", no_load)
    monkeypatch.setattr(cotcredit.training.run, "load_policy", no_load)
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "in.jsonl"
    f.write_text("".join(json.dumps(t) + "\n" for t in BAD_THIRD_LINE))
    (tmp_path / "c.yaml").write_text(f"train_file: {f}\noutput_dir: {tmp_path / 'run'}\n")
    argv = [{"F": f, "CONFIG": tmp_path / "c.yaml"}.get(a, a) for a in argv]
    code, _, err = run(argv, capsys)
    assert code == 2, err
    assert "in.jsonl:3:" in err and ("answer" in err or "response" in err)
    assert "Traceback" not in err
    assert not list(tmp_path.glob("*.parquet")) and not (tmp_path / "report").exists()


def test_bad_options_and_segments_file_cost_no_model_load(traces_file, tmp_path, capsys,
                                                          monkeypatch):
    import cotcredit.lm

    monkeypatch.setattr(cotcredit.lm, "load_scorer", lambda *a, **k: pytest.fail("loaded"))
    for argv, message in (
        (["redistribute", traces_file, "--value", "nope"], "--value must be one of"),
        (["mc-baseline", traces_file, "--rollouts", "0"], "rollouts"),
        (["redistribute", traces_file, "--segments-file", tmp_path / "none.parquet"],
         "none.parquet: no such file"),
    ):
        code, _, err = run([*argv, "-o", tmp_path / "o.parquet"], capsys)
        assert code == 2 and message in err, (argv, err)


STARTUP_SCRIPT = """
import sys
from cotcredit.cli import main

codes = []
for argv in ARGVS:
    try:
        main(argv)
        codes.append(0)
    except SystemExit as e:
        codes.append(e.code or 0)
heavy = ("torch", "transformers", "datasets", "pandas", "scipy", "matplotlib", "sympy",
         "pyarrow", "numpy", "captum", "shap", "trl")
print("CODES", codes, file=sys.stderr)
print("LOADED", sorted(m for m in heavy if m in sys.modules), file=sys.stderr)
"""


@pytest.mark.subprocess
def test_help_and_early_errors_load_no_model_stack(tmp_path):
    """`cotcredit --help`, every `cotcredit CMD --help`, a bad traces line and a missing
    `--model` path answer without importing torch, transformers, pandas, pyarrow or numpy (the
    model stack is what made --help take seconds)."""
    import subprocess
    import sys

    import typer

    from cotcredit.cli import app

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "Q", "answer": "1"}\n')  # no response (segment needs no answer)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "Q?", "response": "Think.\nAnswer: 1", "answer": "1"})
                    + "\n")
    commands = list(typer.main.get_group(app).commands)
    argvs = [["--help"], *([c, "--help"] for c in commands),
             ["segment", str(bad), "-o", str(tmp_path / "o.parquet")],
             ["redistribute", str(good), "--model", "./no/such/model", "-o", str(tmp_path / "r")]]
    script = STARTUP_SCRIPT.replace("ARGVS", repr(argvs))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 0, proc.stderr
    assert lines[-2] == f"CODES {[0] * (1 + len(commands)) + [2, 2]}", proc.stderr
    assert lines[-1] == "LOADED []", proc.stderr
    assert "bad.jsonl:1: missing response" in proc.stderr
    assert "--model: no such folder or file: ./no/such/model" in proc.stderr
    assert len(commands) >= 9 and "Usage: " in proc.stdout


@pytest.mark.subprocess
def test_import_cotcredit_is_light_and_complete():
    """`import cotcredit` keeps its API (functions load on first use) without the model stack."""
    import subprocess
    import sys

    script = ("import sys, cotcredit\n"
              "light = not {'torch', 'pandas', 'pyarrow'} & set(sys.modules)\n"
              "names = [n for n in cotcredit.__all__ if callable(getattr(cotcredit, n))]\n"
              "from cotcredit import segment, redistribute\n"
              "print(light, sorted(names))")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split(" ", 1)[0] == "True"
    for name in ("segment", "redistribute", "mc_baseline", "attribute", "compare", "export",
                 "merge", "generate", "train"):
        assert repr(name) in proc.stdout
