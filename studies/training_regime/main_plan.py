"""The main study's plan (main_plan.json, fixed by the power amendment) and its progress: which
runs come next and what each look decides.

A plan names the setup, the arms in the chosen oracle span and form, the seeds, and the looks
(a fixed design has one, at its last seed). Each primary comparison is a source - grpo in
`online`, tested at every look it reaches with the look's nominal level (`sequential.look`).
A source's arm stops at its comparison's first stop (efficacy, harm, futility); the oracle's
comparison gates the sources: when it stops for futility or harm, so do theirs (a source
cannot show a gain where perfect credit shows none). grpo, the oracle and shuffled run at every
seed a live source runs. `cheap` runs after the other sources have stopped (its configuration
comes from the cost study when they have), through the same looks.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from studies.training_regime.sequential import look, t_to_z, verdict

SOURCES = ("rredcot", "mc")  # the primary sources of the first phase; `cheap` follows them
LAST = ("cheap",)
STOPS = ("efficacy", "harm", "futility")


def arm_names(span: str, form: str) -> dict[str, str]:
    """The arm of each role in the chosen span and form (setups.ARMS names)."""
    sr = "-sr" if form == "segment-rewards" else ""
    first = "-first" if span == "first" else ""
    roles = {"grpo": "grpo", "oracle": f"oracle{first}{sr}", "shuffled": f"shuffled{first}{sr}"}
    roles.update({s: f"{s}{sr}" for s in SOURCES + LAST})
    return roles


def make_plan(setup: str, span: str, form: str, sequential: dict, *, first_seed: int = 100,
              **notes) -> dict:
    """main_plan.json from the amendment's choices: `sequential` is a `sequential.design` (a
    fixed design of n seeds is one look: {"looks": [n], "z": [1.96], "futility_z": [1.96]})."""
    n = sequential["looks"][-1]
    design = {k: v for k, v in sequential.items() if k not in ("looks", "z", "futility_z")}
    return {"setup": setup, "span": span, "form": form, "roles": arm_names(span, form),
            "seeds": list(range(first_seed, first_seed + n)),
            "looks": list(sequential["looks"]), "z": list(sequential["z"]),
            "futility_z": list(sequential["futility_z"]), "design": design, **notes}


def _differences(table, plan: dict, arm: str, base: str, n: int):
    """arm - base `online` over the plan's first n seeds, None unless both have all n."""
    from studies.training_regime.summarize import differences

    seeds = plan["seeds"][:n]
    d = differences(table, plan["setup"], arm, base, seeds)
    return d.loc[seeds].tolist() if len(d) == n else None


def progress(table, plan: dict) -> dict:
    """Per primary comparison its looks so far and its state (`live` or its verdict), the
    arms and seeds to run next (none when the study is over), and each source's standing
    under the default rule (efficacy against grpo and, at the same look's level, a positive
    difference from shuffled)."""
    roles, looks = plan["roles"], plan["looks"]
    comparisons = {"oracle": [], **{s: [] for s in SOURCES + LAST}}
    state = dict.fromkeys(comparisons, "live")
    default = {}
    for index, n in enumerate(looks):
        for role in comparisons:
            if state[role] != "live":
                continue
            d = _differences(table, plan, roles[role], roles["grpo"], n)
            if d is None:
                continue
            result = look(d, plan, index)
            comparisons[role].append(result)
            if result["verdict"] != "continue":
                state[role] = result["verdict"]
            if role != "oracle" and result["verdict"] in ("efficacy", "not significant"):
                s = _differences(table, plan, roles[role], roles["shuffled"], n)
                vs = look(s, plan, index) if s is not None else None
                default[role] = {"look": index + 1, "vs_grpo": result, "vs_shuffled": vs,
                                 "qualifies": result["verdict"] == "efficacy" and vs is not None
                                 and vs["verdict"] == "efficacy"}
        if state["oracle"] in ("futility", "harm"):
            for role in SOURCES + LAST:
                if state[role] == "live":
                    state[role] = f"stopped with the oracle ({state['oracle']})"
    live = [r for r in SOURCES if state[r] == "live"]
    if not live:
        live = [r for r in LAST if state[r] == "live"]
    arms, seeds = [], []
    if live:
        # the next look none of the live comparisons has read
        done = min(len(comparisons[r]) for r in live)
        upto = looks[min(done, len(looks) - 1)]
        arms = ["grpo", "oracle", "shuffled", *live]
        seeds = plan["seeds"][:upto]
    return {"comparisons": comparisons, "state": state, "default": default,
            "next_arms": [roles[a] for a in arms], "next_seeds": seeds, "done": not live}


def runs_ahead(plan: dict, state: dict) -> list[tuple[int, str]]:
    """(seed, arm) of the runs the look after the next one needs whatever the next decides:
    grpo, the oracle and shuffled on its new seeds (they run at every seed a live source runs).
    None when nothing is live or the next look is the last one; if the next look stops every
    comparison, these runs are not read (at most one look's controls, a few runs, lost)."""
    if state["done"]:
        return []
    upto = len(state["next_seeds"])
    later = [n for n in plan["looks"] if n > upto]
    seeds = plan["seeds"][upto:later[0]] if later else []
    return [(s, plan["roles"][r]) for s in seeds for r in ("grpo", "oracle", "shuffled")]


def write_progress(out: Path, table, plan: dict) -> dict:
    """`progress` written to main_looks.json (tracked: what each look decided)."""
    result = progress(table, plan)
    (out / "main_looks.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    return result


def look_table(table, state: dict, plan: dict):
    """The runs of the newest look's seeds (the plan's first n, n the most seeds any
    comparison has read), and a line saying so; every run, and no line, before the first
    look. Finished runs of later seeds wait for their look: with them, arms would be averaged
    over different seeds."""
    n = max((looks[-1]["seeds"] for looks in state["comparisons"].values() if looks),
            default=0)
    if not n:
        return table, ""
    seeds = plan["seeds"][:n]
    later = sorted(set(table.seed) - set(seeds))
    line = (f"The tables below read seeds {seeds[0]}-{seeds[-1]}, the newest look's"
            + (f"; {int((table.seed.isin(later)).sum())} finished runs of later seeds wait "
               "for the next look (main_runs.csv has them)." if later else "."))
    return table[table.seed.isin(seeds)], line


def looks_markdown(state: dict, plan: dict) -> str:
    """The group-sequential decisions so far: per primary comparison its state and each look
    it read (mean, z, its bounds, verdict), and the default rule's standing."""
    roles = plan["roles"]
    lines = ["## Looks (the plan's decisions)\n",
             "| comparison | state | look | seeds | mean | repeated 95% CI | z | efficacy z | "
             "futility z | verdict |", "|---" * 10 + "|"]
    for role, looks in state["comparisons"].items():
        name = f"{roles[role]} − grpo"
        if not looks:
            lines.append(f"| {name} | {state['state'][role]} |" + " – |" * 8)
        for r in looks:
            lines.append(f"| {name} | {state['state'][role]} | {r['look']} | {r['seeds']} | "
                         f"{r['mean']:+.3f} | [{r['rci_low']:+.3f}, {r['rci_high']:+.3f}] | "
                         f"{r['z']:+.2f} | {r['z_bound']:.2f} | {r['futility_z']:+.2f} | "
                         f"{r['verdict']} |")
    qualifies = [roles[r] for r, d in state["default"].items() if d["qualifies"]]
    lines += ["", f"Default rule (efficacy against grpo and against {roles['shuffled']} at the "
              f"same look): {', '.join(qualifies) if qualifies else 'no source qualifies yet'}. "
              "The repeated confidence intervals hold over every look together, whenever the "
              "study stops (amendment 6; clipped to [-1, +1]); the t-intervals in the tables "
              "below are not adjusted for the looks; the decisions are the bounds.", ""]
    return "\n".join(lines)


def look_descriptions(table, state: dict, plan: dict) -> str:
    """What the docs say of the newest look beside its decisions, computed, not decided: each
    arm's mean difference from grpo on each look's new seeds alone (every look so far, so that
    the docs' comparisons with earlier looks' new seeds can be checked in one file), each
    comparison's paired SD over the look's seeds, and the arithmetic of the next look (the z
    its seeds would give were the mean and SD to stay as they are, against that look's bounds,
    and the first look whose bounds it would cross; then the first such look were the later
    seeds instead to gain nothing on average, the SD unchanged). Empty before a look."""
    from studies.training_regime.summarize import differences

    read = [(role, looks[-1]) for role, looks in state["comparisons"].items() if looks]
    if not read:
        return ""
    k = max(r["look"] for _, r in read)
    looks, seeds, setup, roles = plan["looks"], plan["seeds"], plan["setup"], plan["roles"]
    arms = sorted(a for a in dict.fromkeys(table.arm) if a != "grpo")
    lines = [f"## Outside the plan (descriptions of look {k}, not decisions)\n",
             "Arm − grpo on each look's new seeds alone, online / held-out (a count in brackets "
             "where an arm has fewer of the look's seeds; look "
             f"{k}'s, the newest, last):\n",
             "| look | seeds | " + " | ".join(arms) + " |", "|---" * (len(arms) + 2) + "|"]
    for j in range(1, k + 1):
        new = seeds[looks[j - 2] if j > 1 else 0:looks[j - 1]]
        cells = [str(j), f"{new[0]}-{new[-1]}"]
        for arm in arms:
            on, held = (differences(table, setup, arm, "grpo", new, key)
                        for key in ("online", "final"))
            count = f" ({len(on)})" if 0 < len(on) < len(new) else ""
            cells.append(f"{on.mean():+.3f} / {held.mean():+.3f}{count}" if len(on) else "–")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Each comparison at its last look: the paired SD over its seeds (online), and "
              "were its mean and SD to stay as they are, its z at the next look and the first "
              "look that would stop it; the last column: the first look that would stop it were "
              "the later seeds instead to gain nothing on average, the SD unchanged (arithmetic, "
              "not a forecast):\n",
              "| comparison | look | seeds | mean | paired SD | next look | its seeds | z there | "
              "efficacy z | futility z | first stop | first stop at zero gain |",
              "|---" * 12 + "|"]
    for role, r in read:
        sd = statistics.stdev(_differences(table, plan, roles[role], roles["grpo"], r["seeds"]))
        cells = [f"{roles[role]} − grpo", str(r["look"]), str(r["seeds"]), f"{r['mean']:+.3f}",
                 f"{sd:.3f}"]
        if state["state"][role] == "live" and r["look"] < len(looks):
            m = looks[r["look"]]
            cells += [str(r["look"] + 1), str(m), f"{float(t_to_z(r['mean'], sd, m)):+.2f}",
                      f"{plan['z'][r['look']]:.2f}", f"{plan['futility_z'][r['look']]:+.2f}",
                      _first_stop(r["mean"], sd, plan, r["look"]),
                      _first_stop(r["mean"], sd, plan, r["look"], seeds_so_far=r["seeds"])]
        else:
            cells += [f"– ({state['state'][role]})"] + ["–"] * 6
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _first_stop(mean: float, sd: float, plan: dict, start: int,
                seeds_so_far: int | None = None) -> str:
    """The first look from index `start` whose decision would stop a comparison whose mean and
    paired SD stayed as they are: 'look 13 (104 seeds): efficacy'. With `seeds_so_far`, the mean
    is instead diluted by later seeds that gain nothing (the sum over the seeds so far, divided
    by the look's seeds)."""
    for i in range(start, len(plan["looks"])):
        n = plan["looks"][i]
        m = mean if seeds_so_far is None else mean * seeds_so_far / n
        v = verdict(float(t_to_z(m, sd, n)), plan, i)
        if v != "continue":
            return f"look {i + 1} ({n} seeds): {v}"
    raise AssertionError("the last look always decides")


def _minus(text: str) -> str:
    return text.replace("-", "−")  # the docs' typographic minus


def look_docs_tables(table, state: dict, plan: dict, k: int) -> str:
    """Look `k`'s two tables as the docs print them (docs/studies/training-regime.md): each primary
    comparison's decision with its repeated interval, then the look's seeds described with
    t-intervals not adjusted for the looks (the oracle, the sources, the shuffled control)."""
    from studies.seed_runs import interval_cell
    from studies.training_regime.summarize import summary_rows

    roles = plan["roles"]
    read = {role: r for role, looks in state["comparisons"].items() for r in looks
            if r["look"] == k}
    if not read:
        raise ValueError(f"no comparison has read look {k}")
    lines = ["| comparison | online mean | z | repeated 95% CI | decision |", "|---" * 5 + "|"]
    for role, r in read.items():
        cells = (f"{r['mean']:+.3f} | {r['z']:+.2f} | "
                 f"[{r['rci_low']:+.3f}, {r['rci_high']:+.3f}]")
        lines.append(f"| {roles[role]} − grpo | {_minus(cells)} | {r['verdict']} |")
    n = next(iter(read.values()))["seeds"]
    rows = {r["arm"]: r for r in summary_rows(table[table.seed.isin(plan["seeds"][:n])])}
    shuffled = roles["shuffled"]
    order = [roles["oracle"], *sorted(roles[s] for s in SOURCES + LAST), shuffled]
    lines += ["", f"| arm | online − grpo | held-out − grpo | online − {shuffled} | share of the "
              "oracle's gain | s / step × grpo |", "|---" * 6 + "|"]
    for arm in (a for a in order if a in rows):
        r = rows[arm]
        cells = [interval_cell(r, "online_vs_grpo"), interval_cell(r, "final_vs_grpo"),
                 interval_cell(r, "online_vs_shuffled"), interval_cell(r, "recovered", 2),
                 f"{r['x_grpo']:.2f}"]
        lines.append(f"| {arm} | " + " | ".join(_minus(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def standing_docs_table(state: dict, plan: dict) -> str:
    """Where the main study stands, as the docs print it above the looks' history: each primary
    comparison at the last look it read (its seeds, mean, repeated interval) and whether it
    continues or stopped there; a comparison with no look yet has not started."""
    roles = plan["roles"]
    lines = ["| comparison | last look | seeds | online mean | repeated 95% CI | decision |",
             "|---" * 6 + "|"]
    for role, looks in state["comparisons"].items():
        name = f"{roles[role]} − grpo"
        if not looks:
            lines.append(f"| {name} | – | – | – | – | not started |")
            continue
        r = looks[-1]
        decision = ("continues" if state["state"][role] == "live"
                    else f"stopped: {state['state'][role]}")
        cells = _minus(f"{r['mean']:+.3f} | [{r['rci_low']:+.3f}, {r['rci_high']:+.3f}]")
        lines.append(f"| {name} | {r['look']} | {r['seeds']} | {cells} | {decision} |")
    return "\n".join(lines) + "\n"
