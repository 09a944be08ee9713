"""`run_bench` on the shipped `unique` regime at a tiny size: outputs, resuming, a failing
method, variants, errors."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from cotcredit.bench import BenchSize, get_regime, run_bench
from cotcredit.errors import UserError
from cotcredit.methods import MethodSpec, registry

TINY = BenchSize(problems=3, samples=2, rollouts=4, n_boot=50, splits=2)


def bench(tmp_path, methods="rredcot,loo", **kwargs):
    kwargs.setdefault("output", tmp_path / "bench")
    kwargs.setdefault("cache", tmp_path / "cache")
    kwargs.setdefault("reports", False)  # figures: the slow part; the first run writes them
    return run_bench("unique", methods, size=TINY, threads=1, **kwargs)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    return tmp, bench(tmp, reports=True)


def test_bench_writes_tables_metrics_and_leaderboard(first_run):
    tmp, result = first_run
    out = tmp / "bench"
    assert result.failures == []
    for split in ("dev", "test"):
        for name in ("segments", "rredcot", "loo", "mc", "rollouts"):
            assert (out / "unique" / split / f"{name}.parquet").exists()
        metrics = pd.read_csv(out / "unique" / split / "metrics.csv")
        assert {"localization", "mc_tracking", "cost"} <= set(metrics["metric"])
    assert (out / "unique" / "report" / "report.md").exists()
    from cotcredit.report.explorer import read_explorer_data

    page = read_explorer_data(out / "unique" / "explorer.html")
    assert page["methods"] == ["rredcot", "loo", "mc", "refdiff", "refdiff-siblings", "entropy"]
    for name in ("leaderboard.md", "leaderboard.csv", "leaderboard.json", "results.csv",
                 "bench.json"):
        assert (out / name).exists()
    board = result.leaderboard
    assert list(board["method"]) == ["rredcot", "loo", "mc", "refdiff", "refdiff-solutions",
                                     "refdiff-siblings", "entropy", "position",
                                     "position-length", "random"]
    assert dict(zip(board["method"], board["reads"], strict=True))["rredcot"] == "siblings"
    # one segment per reasoning line: the segments are the response's lines
    seg = pd.read_parquet(out / "unique" / "test" / "segments.parquet")
    assert seg["text"].str.endswith("\n").all()
    assert (seg.groupby("trace_id")["text"].apply(lambda t: t.str.count("\n").sum())
            == seg.groupby("trace_id").size()).all()


def test_an_interrupted_bench_resumes_without_rescoring(first_run, monkeypatch):
    tmp, result = first_run
    calls = []
    spec = registry()["rredcot"]
    counted = dataclasses.replace(spec, run=lambda ctx, o: calls.append(1) or spec.run(ctx, o))
    monkeypatch.setitem(registry(), "rredcot", counted)
    again = bench(tmp)
    assert calls == []  # every trace was already scored
    pd.testing.assert_frame_equal(again.leaderboard, result.leaderboard)


@dataclasses.dataclass(frozen=True)
class BrokenOptions:
    pass


def _broken(ctx, options):
    raise RuntimeError("this method always fails")


def test_a_failing_method_is_one_line_and_keeps_the_others(first_run, tmp_path, monkeypatch):
    broken = MethodSpec(name="broken", options_type=BrokenOptions, run=_broken,
                        labels=lambda o: ["broken"])
    monkeypatch.setitem(registry(), "broken", broken)
    result = bench(tmp_path, "rredcot,broken", cache=first_run[0] / "cache")
    assert len(result.failures) == 2  # dev and test
    assert all("broken" in f and "always fails" in f and "\n" not in f for f in result.failures)
    assert "rredcot" in set(result.leaderboard["method"])
    assert (tmp_path / "bench" / "unique" / "test" / "broken.error.txt").exists()


def test_named_variants_from_a_config(first_run, tmp_path):
    config = tmp_path / "variants.yaml"
    config.write_text("rredcot-norm: {method: rredcot, length_norm: true}\n")
    result = bench(tmp_path, "rredcot,rredcot-norm,rredcot-rhat", config=config,
                   cache=first_run[0] / "cache")
    assert result.failures == []
    test = tmp_path / "bench" / "unique" / "test"
    norm = pd.read_parquet(test / "rredcot-norm.parquet")
    rhat = pd.read_parquet(test / "rredcot-rhat.parquet")
    assert set(norm["method"]) == {"rredcot-norm"} and set(rhat["method"]) == {"rredcot-rhat"}
    plain = pd.read_parquet(test / "rredcot.parquet")
    assert not (plain["score"].to_numpy() == rhat["score"].to_numpy()).all()


def test_user_errors_are_one_line(tmp_path):
    with pytest.raises(UserError, match="unknown regime 'nope'") as err:
        run_bench("unique,nope", "rredcot", size=TINY, output=tmp_path / "b")
    assert "\n" not in str(err.value)
    with pytest.raises(UserError, match="unknown method or variant 'nope'"):
        run_bench("unique", "rredcot,nope", size=TINY, output=tmp_path / "b")
    with pytest.raises(UserError, match="--size"):
        run_bench("unique", "rredcot", size="huge", output=tmp_path / "b")
    with pytest.raises(UserError, match="not cached"):
        run_bench("unique", "rredcot", size=TINY, output=tmp_path / "b",
                  cache=tmp_path / "empty", generate=False)
    assert not (tmp_path / "b" / "unique" / "test").exists()


def test_a_regime_that_cannot_load_is_one_line_and_keeps_the_others(first_run, tmp_path):
    from cotcredit.bench.regimes.unique import Unique

    class Unshipped(Unique):  # a regime of one's own, whose checkpoint is missing
        name = "unshipped"

        def model(self) -> str:
            return str(tmp_path / "no-checkpoint")

    result = run_bench([get_regime("unique"), Unshipped()], "rredcot", size=TINY, threads=1,
                       output=tmp_path / "bench", cache=first_run[0] / "cache", reports=False)
    assert len(result.failures) == 1 and result.failures[0].startswith("unshipped: ")
    assert set(result.leaderboard["regime"]) == {"unique"}


def test_a_regime_without_a_model_is_left_out_by_default_and_named(first_run, tmp_path,
                                                                   monkeypatch):
    from cotcredit.bench import regimes
    from cotcredit.bench.regimes.unique import Unique

    class Unshipped(Unique):  # a regime whose checkpoint does not ship
        name = "unshipped"
        unavailable = "no checkpoint yet: it did not learn"

    monkeypatch.setattr(regimes, "REGIMES", {"unique": get_regime("unique"),
                                             "unshipped": Unshipped()})
    # named on purpose: one line, the other regimes go on
    named = run_bench("unique,unshipped", "rredcot", size=TINY, threads=1,
                      output=tmp_path / "named", cache=first_run[0] / "cache", reports=False)
    assert named.failures == ["unshipped: cannot run: no checkpoint yet: it did not learn"]
    assert set(named.leaderboard["regime"]) == {"unique"}

    result = run_bench(None, "rredcot", size=TINY, threads=1, output=tmp_path / "bench",
                       cache=first_run[0] / "cache", reports=False)
    assert result.failures == []
    assert set(result.leaderboard["regime"]) == {"unique"}
    assert result.regimes["unshipped"]["missing"] == "no checkpoint yet: it did not learn"
    page = (tmp_path / "bench" / "leaderboard.md").read_text()
    assert "## Not in this run" in page and "`unshipped`: no checkpoint yet" in page
