"""The benchmark's regimes: generators, checkers on hand-made responses, shipped checkpoints,
labelled traces."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from conftest import HOPS_Q, HOPS_RIGHT

from cotcredit.bench.lines import departure_char
from cotcredit.bench.regimes import REGIMES, checkpoint, get_regime
from cotcredit.bench.regimes.base import Problem
from cotcredit.bench.regimes.multipath import solution_of, valid_orders
from cotcredit.bench.regimes.unique import chain_meta, chain_of
from cotcredit.errors import UserError

ORGANISMS = ("unique", "multipath", "forecast", "long")
EXIT = "The answer is "


def problem_of(regime: str, start: int, steps) -> Problem:
    """A hand-made organism problem of `regime` (its prompt and references as the regime makes
    them)."""
    from cotcredit.bench.organism.task import Chain
    from cotcredit.bench.regimes import forecast, multipath

    chain = Chain(start, tuple(steps))
    if regime == "forecast":
        prompt, solution = forecast.prompt_of(chain), forecast.solution_of(chain)
    elif regime == "multipath":
        prompt, solution = multipath.prompt_of(chain), multipath.solution_of(start, chain.steps)
    else:
        prompt, solution = chain.prompt, chain.solution
    return Problem(id="p", prompt=prompt, answer=str(chain.answer), solution=solution,
                   solutions=(solution,), meta=chain_meta(chain))


def offset(text: str, line: int) -> int:
    """Offset of 0-based `line` of `text`."""
    return sum(len(x) + 1 for x in text.split("\n")[:line])


def label(regime: str, problem: Problem, response: str):
    return get_regime(regime).check(problem, response)


# ---- the registry and the generators ---------------------------------------------------------
def test_registry_order_and_unknown_name():
    assert list(REGIMES) == ["unique", "multipath", "forecast", "long", "groups", "hops"]
    with pytest.raises(UserError) as e:
        get_regime("nope")
    assert "\n" not in str(e.value)
    assert "unique, multipath, forecast, long, groups, hops" in str(e.value)
    for r in REGIMES.values():
        assert r.description and r.hypothesis and r.exit_string == EXIT
        assert {"temperature", "top_p", "max_new_tokens"} <= set(r.sampling)


@pytest.mark.parametrize("name", list(REGIMES))
def test_generators_are_deterministic_disjoint_and_right(name):
    r = get_regime(name)
    dev = r.problems("dev", 12)
    assert dev == r.problems("dev", 12)  # seeded
    assert r.problems("dev", 5) == dev[:5]  # the first n of one stream
    test, train = r.problems("test", 12), r.problems("train", 40)
    keys = [{r.key(p) for p in s} for s in (train, dev, test)]
    assert sum(map(len, keys)) == 64 == len(set.union(*keys))  # disjoint by prompt
    # train never meets any problem of the held-out pools, not only the first ones
    pools = {r.key(p) for s in ("dev", "test") for p in r.problems(s, r.pools[s])}
    assert not keys[0] & pools
    for p in dev + test:
        assert json.loads(json.dumps(p.to_json()))["solution"] == p.solution
        assert p.solutions[0] == p.solution
        for ref in p.solutions:  # every reference offered is a right path
            lab = r.check(p, ref)
            assert (lab.correct, lab.error_char, lab.first_error_step) == (True, -1, 0)
        assert r.check(p, p.solution).departure_char == -1


def test_problem_ids_and_split_errors():
    r = get_regime("unique")
    assert [p.id for p in r.problems("test", 2)] == ["unique-test-0", "unique-test-1"]
    with pytest.raises(UserError):
        r.problems("validation", 1)
    with pytest.raises(UserError, match="300 problems"):
        r.problems("dev", 301)


def test_unique_splits_are_the_ones_its_checkpoint_was_trained_around():
    """The shipped `unique` checkpoint was trained on the train split of
    split_problems({test: 1000, dev: 300, train: 20000}); the regime's splits are those."""
    from cotcredit.bench.organism.task import split_problems

    s = split_problems({"test": 1000, "dev": 300, "train": 30})
    r = get_regime("unique")
    for split in ("test", "dev", "train"):
        assert [p.prompt for p in r.problems(split, 30)] == [p.prompt for p in s[split][:30]]


def test_long_and_multipath_shapes():
    for p in get_regime("long").problems("dev", 50):
        assert 20 <= len(p.meta["steps"]) <= 40
        chain = chain_of(p)
        add, subtract, threshold = p.meta["rule"]
        assert add <= 20 - threshold and subtract <= threshold  # every value in 0..19
        assert all(0 <= v <= 19 for v in chain.values)
        assert all(s == (("+", add) if v < threshold else ("-", subtract))
                   for v, s in zip(chain.values, chain.steps))
    for p in get_regime("multipath").problems("dev", 20):
        assert 4 <= len(p.meta["steps"]) <= 6 and p.meta["valid_orders"] >= 3
        assert len(p.solutions) == min(p.meta["valid_orders"], 8)
        # drawn so that every order of the operations is valid
        steps = [tuple(s) for s in p.meta["steps"]]
        assert p.meta["valid_orders"] == len(set(itertools.permutations(steps)))


# ---- departure -------------------------------------------------------------------------------
def test_departure_char_alignment():
    ref = "a\nb\nc\nThe answer is 1."
    assert departure_char("a\nb\nc\nThe answer is 1.", ref, EXIT) == -1
    assert departure_char("a\nb\nc\nThe answer is 2.", ref, EXIT) == -1  # answers not compared
    assert departure_char("a\nx\nc\nThe answer is 1.", ref, EXIT) == 2
    assert departure_char("a\n\n  b \nc\nThe answer is 1.", ref, EXIT) == -1  # blanks, spaces
    assert departure_char("a\nb\nThe answer is 1.", ref, EXIT) == 4  # one line short
    assert departure_char("a\nb", ref, EXIT) == 3  # cut off: the end
    assert departure_char("a\nb\nc\nd\nThe answer is 1.", ref, EXIT) == 6  # one line more


# ---- unique and long -------------------------------------------------------------------------
P4 = [("+", 25), ("-", 18), ("+", 9), ("-", 40)]


@pytest.mark.parametrize("regime", ["unique"])
def test_chain_checker_kinds_offsets_and_departure(regime):
    p = problem_of(regime, 37, P4)
    right = "37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\nThe answer is 13."
    assert p.solution == right
    cases = [
        ("37 + 25 = 61\n61 - 18 = 43\n43 + 9 = 52\n52 - 40 = 12\nThe answer is 12.", 1,
         "arithmetic", False),
        ("37 + 25 = 62\n26 - 18 = 8\n8 + 9 = 17\n17 - 40 = 0\nThe answer is 0.", 2, "carry", False),
        ("37 + 25 = 62\n62 - 18 = 44\n44 - 9 = 35\n35 - 40 = 0\nThe answer is 0.", 3, "operand",
         False),
        ("37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 4 0 = 13\nThe answer is 13.", 4, "garbled",
         True),  # a wrong step, the right answer
        ("37 + 25 = 62\n62 - 18 = 44\n44 + 9 = 53\n53 - 40 = 13\n13 + 0 = 13\nThe answer is 13.", 5,
         "extra", True),
    ]
    for response, step, kind, correct in cases:
        lab = label(regime, p, response)
        assert (lab.first_error_step, lab.error_kind, lab.correct) == (step, kind, correct)
        assert lab.error_char == offset(response, step - 1)
        # one valid path: the departure is the first error
        assert lab.departure_char == lab.error_char and not lab.valid_departure
    short = "37 + 25 = 62\n62 - 18 = 44\nThe answer is 13."
    lab = label(regime, p, short)
    assert (lab.error_kind, lab.error_char, lab.departure_char) == ("missing", 26, 26)


def test_long_checker_numbered_rule_lines():
    from cotcredit.bench.regimes.long import Rule, prompt_of, rule_of, solution_of

    r = get_regime("long")
    p = r.problems("test", 1)[0]
    chain, rule = chain_of(p), rule_of(p)
    n = len(chain.steps)
    assert p.prompt == prompt_of(chain.start, n, rule)
    assert p.prompt.startswith(f"Start at {chain.start}. Repeat {n} times: add {rule.add} if")
    assert p.solution == solution_of(chain) and p.solution.startswith("1: ")
    lines = p.solution.split("\n")
    assert len(lines) - 1 == n and 20 <= n <= 40
    def other(a):  # the rule's other branch: its operation and result
        return ("-", rule.subtract, a - rule.subtract) if a < rule.threshold else (
            "+", rule.add, a + rule.add)

    # a late line (0-based) where the other branch stays in 0..19
    i = max(j for j in range(n - 1) if 0 <= other(chain.values[j])[2] <= 19)
    assert i > 10
    a, (op, b), wrong = chain.values[i], chain.steps[i], other(chain.values[i])
    for bad_line, kind in [
        (f"{i + 1}: {(a + 1) % 20} {op} {b} = 0", "carry"),
        (lines[i].replace(f"{i + 1}:", f"{i + 2}:"), "index"),
        (lines[i].split(": ", 1)[1], "garbled"),  # the number left out
        (lines[i + 1].replace(f"{i + 2}:", f"{i + 1}:"), "carry"),  # the next step's line
        (f"{i + 1}: {a} {wrong[0]} {wrong[1]} = {wrong[2]}", "operand"),  # the wrong branch
        (f"{i + 1}: {a} {op} {b} = {(chain.values[i + 1] + 1) % 20}", "arithmetic"),
    ]:
        response = "\n".join(lines[:i] + [bad_line] + lines[i + 1 :])
        lab = r.check(p, response)
        assert (lab.first_error_step, lab.error_kind, lab.n_steps) == (i + 1, kind, n), bad_line
        assert lab.error_char == offset(response, i) == lab.departure_char
        assert lab.correct  # the later lines are the reference's: the answer is graded alone
    short = "\n".join(lines[:i] + lines[-1:])
    lab = r.check(p, short)
    assert (lab.error_kind, lab.first_error_step, lab.error_char) == ("missing", i + 1,
                                                                      offset(short, i))
    extra = "\n".join(lines[:-1] + [f"{n + 1}: 1 + 1 = 2"] + lines[-1:])
    assert r.check(p, extra).error_kind == "extra"
    # the rule on a hand-made chain: below the threshold add, otherwise subtract
    assert Rule(7, 9, 10).chain(6, 4).steps == (("+", 7), ("-", 9), ("+", 7), ("-", 9))


# ---- multipath -------------------------------------------------------------------------------
MP = [("+", 4), ("-", 9), ("+", 6), ("-", 3)]  # from 7: 11, 2, 8, 5


def test_multipath_accepts_every_valid_order_and_only_those():
    p = problem_of("multipath", 7, MP)
    orders = valid_orders(7, tuple(sorted(MP)))

    def stays_in_range(order) -> bool:
        values = itertools.accumulate(order, lambda v, s: v + s[1] if s[0] == "+" else v - s[1],
                                      initial=7)
        return all(0 <= v <= 19 for v in values)

    by_brute_force = [o for o in set(itertools.permutations(MP)) if stays_in_range(o)]
    assert sorted(orders) == sorted(by_brute_force) and len(orders) > 3
    for order in orders:
        response = solution_of(7, order)
        lab = label("multipath", p, response)
        assert (lab.correct, lab.error_char, lab.first_error_step) == (True, -1, 0)
        follows = tuple(order) == tuple(MP)
        assert lab.valid_departure == (not follows)
        if not follows:  # the departure is the first line that differs from the reference
            first = next(i for i, (a, b) in enumerate(zip(order, MP)) if a != b)
            assert lab.departure_char == offset(response, first)


@pytest.mark.parametrize("lines, step, kind", [
    (["7 - 9 = -2"], 1, "range"),                        # leaves 0..19
    (["7 + 4 = 11", "11 + 4 = 15"], 2, "operand"),       # an operation used twice
    (["7 + 4 = 11", "11 + 5 = 16"], 2, "operand"),       # not in the problem
    (["7 + 4 = 11", "12 - 9 = 3"], 2, "carry"),
    (["7 + 4 = 11", "11 - 9 = 3"], 2, "arithmetic"),
    (["7 + 4 = 11", "11 - 9 is 2"], 2, "garbled"),
])
def test_multipath_error_kinds(lines, step, kind):
    p = problem_of("multipath", 7, MP)
    response = "\n".join(lines) + "\nThe answer is 5."
    lab = label("multipath", p, response)
    assert (lab.first_error_step, lab.error_kind) == (step, kind)
    assert lab.error_char == offset(response, step - 1)
    assert lab.correct and not lab.valid_departure  # the right answer after a wrong step


def test_multipath_dead_end_missing_and_extra():
    # 1 -> 10 -> 19 -> 1 -> 2 is the reference; 1 + 9 = 10, 10 + 1 = 11 is right arithmetic in
    # range, but from 11 neither +9 nor -18 stays in 0..19: a dead end at the second step
    p = problem_of("multipath", 1, [("+", 9), ("+", 9), ("-", 18), ("+", 1)])
    response = "1 + 9 = 10\n10 + 9 = 19\n19 + 1 = 20\nThe answer is 2."
    lab = label("multipath", p, response)
    assert (lab.first_error_step, lab.error_kind) == (3, "range")
    dead = "1 + 9 = 10\n10 + 1 = 11\nThe answer is 2."
    lab = label("multipath", p, dead)
    assert (lab.first_error_step, lab.error_kind, lab.error_char) == (2, "dead end", 11)
    p = problem_of("multipath", 7, MP)
    short = "7 + 4 = 11\n11 - 9 = 2\nThe answer is 5."
    assert label("multipath", p, short).error_kind == "missing"
    extra = solution_of(7, tuple(MP)).replace("The answer", "5 + 0 = 5\nThe answer")
    lab = label("multipath", p, extra)
    assert (lab.error_kind, lab.first_error_step, lab.correct) == ("extra", 5, True)


def test_multipath_training_orders_are_uniform_over_valid_orders():
    import random

    r = get_regime("multipath")
    p = problem_of("multipath", 7, MP)
    rng = random.Random(0)
    drawn = [r.training_response(p, rng) for _ in range(4000)]
    counts = {o: drawn.count(solution_of(7, o)) for o in valid_orders(7, tuple(sorted(MP)))}
    assert sum(counts.values()) == 4000
    expected = 4000 / len(counts)
    assert all(abs(c - expected) < 5 * math.sqrt(expected) for c in counts.values())


# ---- forecast --------------------------------------------------------------------------------
def test_forecast_checker():
    p = problem_of("forecast", 7, [("+", 5), ("-", 9), ("+", 14), ("-", 6)])
    right = ("7 + 5 = 12\n12 - 9 = 3\n3 + 14 = 17\n17 - 6 = 11\nCheck: 11 + 6 = 17\n"
             "Check: 17 - 14 = 3\nCheck: 3 + 9 = 12\nCheck: 12 - 5 = 7\nThe answer is 11.")
    assert p.solution == right
    lab = label("forecast", p, right)
    assert (lab.correct, lab.error_char, lab.n_steps, lab.departure_char) == (True, -1, 8, -1)
    # a wrong check line, then the right answer: the wrong-step-right-answer case
    bad = right.replace("Check: 17 - 14 = 3", "Check: 17 - 14 = 4")
    lab = label("forecast", p, bad)
    assert (lab.first_error_step, lab.error_kind, lab.correct) == (6, "check-arithmetic", True)
    assert lab.error_char == offset(bad, 5) == lab.departure_char
    for old, new, step, kind in [
        ("Check: 11 + 6 = 17", "Check: 11 - 6 = 5", 5, "check-operand"),
        ("Check: 3 + 9 = 12", "Check: 4 + 9 = 13", 7, "check-carry"),
        ("Check: 12 - 5 = 7", "12 - 5 = 7", 8, "check-garbled"),
        ("Check: 12 - 5 = 7", "Check: 12 - 5 is 7", 8, "check-garbled"),
        ("12 - 9 = 3", "12 - 9 = 4", 2, "arithmetic"),
    ]:
        response = right.replace(old, new)
        lab = label("forecast", p, response)
        assert (lab.first_error_step, lab.error_kind) == (step, kind), new
        assert lab.error_char == offset(response, step - 1)
    cut = right.split("Check: 3")[0] + "The answer is 11."
    lab = label("forecast", p, cut)
    assert (lab.error_kind, lab.first_error_step, lab.correct) == ("missing", 7, True)


# ---- hops ------------------------------------------------------------------------------------
def hops_problem() -> Problem:
    from cotcredit.bench.regimes.hops import chatml

    solution = "\n".join(HOPS_RIGHT) + "\nThe answer is 13."
    return Problem(id="h", prompt=chatml([("user", HOPS_Q)]), answer="13", solution=solution,
                   solutions=(solution,), meta={"user_turn": HOPS_Q})


@pytest.mark.parametrize("i, line, kind", [
    (0, "We start at Emma.", "start"),
    (1, "Mia's friend is Noah.", "friend"),
    (2, "Emma's friend is Noah.", "chain"),
    (3, "Noah's favourite fruit is the kiwi.", "fruit"),
    (4, "The peach costs 31 coins.", "price"),
    (5, "So Noah's favourite fruit costs 72 coins.", "restate"),
    (2, "I am not sure.", "garbled"),
])
def test_hops_checker_through_the_regime(i, line, kind):
    lines = HOPS_RIGHT[:i] + [line] + HOPS_RIGHT[i + 1 :]
    response = "\n".join(lines) + "\nThe answer is 13."
    lab = get_regime("hops").check(hops_problem(), response)
    assert (lab.first_error_step, lab.error_kind, lab.correct) == (i + 1, kind, True)
    assert lab.error_char == offset(response, i) == lab.departure_char
    assert lab.n_steps == 6


def test_hops_test_split_is_the_lookup_study_problems():
    """The test split is `make_problems("hops", n, seed=21)`: the problems (and ids) of the
    lookup study, whose traces are the regime's full test set."""
    from cotcredit.bench.regimes.hops import make_problems

    got = get_regime("hops").problems("test", 5)
    want = make_problems("hops", 5, seed=21)
    assert [(p.id, p.prompt, p.solution) for p in got] == [
        (w["id"], w["prompt"], w["solution"]) for w in want]
    assert checkpoint("hops") == "embedded"


# ---- checkpoints -----------------------------------------------------------------------------
def shipped(name: str) -> Path:
    folder = Path(checkpoint(name))
    if not (folder / "model.safetensors").exists():
        pytest.skip(f"no shipped {name} checkpoint")
    return folder


@pytest.mark.parametrize("name", ORGANISMS)
def test_shipped_checkpoint_loads_generates_and_matches_its_accuracy(name):
    """Each checkpoint samples at temperature 1 as its training.json says: the accuracy on 40
    held-out problems at a fixed seed within a loose bound (4 standard errors) of the held-out
    accuracy recorded there; new checkpoints are at most 2 MB."""
    from cotcredit.bench.organism.train import evaluate, load_checkpoint

    folder = shipped(name)
    info = json.loads((folder / "training.json").read_text())
    size = (folder / "model.safetensors").stat().st_size
    assert size <= (4 * 2**20 if name == "unique" else 2 * 2**20)
    for f in folder.iterdir():  # no machine paths in the shipped files
        if f.suffix in (".json", ".jinja"):
            assert "/work/" not in f.read_text() and "/tmp/" not in f.read_text()
    model, tok = load_checkpoint(folder)
    assert next(model.parameters()).dtype.is_floating_point
    assert str(next(model.parameters()).dtype) == "torch.float32"
    regime = get_regime(name)
    n = 40
    got = evaluate(model, tok, regime, regime.problems("test", n), seed=7)
    want = info["held_out"]["accuracy"]
    assert abs(got["accuracy"] - want) <= 4 * math.sqrt(want * (1 - want) / n) + 1e-9


def test_forecast_checkpoint_forecasts_once_the_answer_is_computed():
    """Mean log p(Y*) of the forced answer after the forward chain (and during the check) is
    well above a uniform guess over the 20 values, and above its value three steps earlier."""
    from cotcredit.bench.organism.build import forecast_key
    from cotcredit.bench.organism.train import forecast_logprob, load_checkpoint

    model, tok = load_checkpoint(shipped("forecast"))
    problems = get_regime("forecast").problems("test", 40)
    table = forecast_logprob(model, tok, problems, EXIT, forecast_key("forecast"))
    uniform = -math.log(20)
    after = [v for k, v in table.items() if k >= 0]
    assert min(after) > uniform + 2.0
    assert table[0] > table[-3] + 1.0  # three forward steps still to compute


# ---- traces ----------------------------------------------------------------------------------
def test_regime_traces_are_labelled_resumable_and_seeded(tmp_path):
    from cotcredit.bench.traces import regime_traces

    shipped("unique")
    path = regime_traces("unique", "dev", 3, 2, tmp_path, seed=0)
    first = [json.loads(x) for x in path.read_text().splitlines()]
    assert path == tmp_path / "unique" / "dev" / "traces.jsonl" and len(first) == 6
    r = get_regime("unique")
    problems = {p.id: p for p in r.problems("dev", 3)}
    for t in first:
        lab = r.check(problems[t["problem_id"]], t["response"])
        assert {k: t[k] for k in lab.to_dict()} == lab.to_dict()
        assert t["outcome"] == float(t["correct"]) and t["split"] == "dev"
        assert t["solutions"] == [t["solution"]]
    # more problems extend the set; the first ones stay as they were
    more = [json.loads(x) for x in regime_traces("unique", "dev", 4, 2, tmp_path).read_text()
            .splitlines()]
    assert more[:6] == first and len(more) == 8
    summary = json.loads((path.parent / "summary.json").read_text())
    assert summary["traces"] == 8 and summary["problems"] == 4
    assert summary["correct"] == sum(t["correct"] for t in more)
    # the same seed elsewhere gives the same traces
    again = regime_traces("unique", "dev", 3, 2, tmp_path / "again", seed=0)
    assert [json.loads(x) for x in again.read_text().splitlines()] == first


@pytest.mark.parametrize("split", ["dev", "test"])
def test_shipped_hops_traces_are_the_first_of_their_split_and_labelled_by_the_checker(split):
    from cotcredit.bench.traces import shipped_traces

    lines = [json.loads(x) for x in shipped_traces("hops", split).read_text().splitlines()]
    r = get_regime("hops")
    problems = r.problems(split, len(lines))
    assert [t["problem_id"] for t in lines] == [p.id for p in problems]
    for t, p in zip(lines, problems):
        assert (t["prompt"], t["solution"], t["split"]) == (p.prompt, p.solution, split)
        lab = r.check(p, t["response"])
        assert {k: t[k] for k in lab.to_dict()} == lab.to_dict()
        assert t["departure_char"] == departure_char(t["response"], p.solution, EXIT)


def test_old_import_path_is_the_new_module():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from cotcredit.organism.checker import check_response as old
        from cotcredit.organism.task import parse_prompt
    from cotcredit.bench.organism.checker import check_response

    assert old is check_response
    p = parse_prompt("Start at 7. Add 5. What number do you end at?")
    assert old(p, "7 + 5 = 12\nThe answer is 12.").correct
