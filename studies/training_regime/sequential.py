"""Group-sequential boundaries for paired seed differences: Lan-DeMets O'Brien-Fleming alpha
spending, two-sided, with looks after every k seeds.

Written here because no Python library at hand computes spending-function boundaries (R's
gsDesign and rpact do); the method is the standard recursive numerical integration of the
score statistic's density over the continuation region (Armitage, McPherson and Rowe 1969;
Jennison and Turnbull 2000, ch. 19). Tests check it against gsDesign's published boundaries
and by simulation.

On the z scale: S_k = Z_k sqrt(t_k) is a Brownian motion in the information fraction t with
drift theta = delta sqrt(N) / sigma at full information (N seeds). A look at n seeds compares
the paired t-test's two-sided p-value with the boundary's nominal level 2 (1 - Phi(c_k)); the
plan's power is simulated as it will be run (t-tests, the futility stop taken).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

GRID = 801  # points over the continuation region; boundaries agree with published ones to 1e-3


def obf_spent(t: float, alpha: float = 0.05) -> float:
    """Two-sided alpha spent by information fraction t: Lan-DeMets O'Brien-Fleming type on
    each side at alpha / 2 (gsDesign's `sfLDOF`, rpact's `asOF`), so
    2 (2 - 2 Phi(z_{1-alpha/4} / sqrt(t)))."""
    if t <= 0:
        return 0.0
    return float(2 * (2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - alpha / 4) / math.sqrt(t))))


def _weights(s: np.ndarray) -> np.ndarray:
    w = np.full(len(s), s[1] - s[0])
    w[[0, -1]] /= 2  # trapezoid rule
    return w


class _Walk:
    """The score statistic's density on the continuation region, look by look."""

    def __init__(self, drift: float):
        self.drift, self.f, self.s, self.t = drift, None, None, 0.0

    def stops(self, t: float, c: float) -> float:
        """Chance of stopping (either side) at a look at fraction t with z boundary c."""
        b, dt = c * math.sqrt(t), t - self.t
        sd, shift = math.sqrt(dt), self.drift * dt
        if self.f is None:
            return float(stats.norm.sf((b - shift) / sd) + stats.norm.cdf((-b - shift) / sd))
        out = stats.norm.sf((b - self.s - shift) / sd) + stats.norm.cdf((-b - self.s - shift) / sd)
        return float((self.f * _weights(self.s)) @ out)

    def advance(self, t: float, c: float) -> None:
        """Continue past a look at fraction t with z boundary c."""
        b, dt = c * math.sqrt(t), t - self.t
        sd, shift = math.sqrt(dt), self.drift * dt
        new = np.linspace(-b, b, GRID)
        if self.f is None:
            self.f = stats.norm.pdf((new - shift) / sd) / sd
        else:
            kernel = stats.norm.pdf((new[:, None] - self.s[None, :] - shift) / sd) / sd
            self.f = kernel @ (self.f * _weights(self.s))
        self.s, self.t = new, t


def _stops(times, bounds, drift: float) -> list[float]:
    """Per look, the chance of stopping there with z boundaries `bounds` (no futility)."""
    walk, out = _Walk(drift), []
    for t, c in zip(times, bounds):
        out.append(walk.stops(t, c))
        walk.advance(t, c)
    return out


def obf_boundaries(looks: int, alpha: float = 0.05, times=None) -> list[float]:
    """Two-sided z boundaries c_1..c_K of Lan-DeMets O'Brien-Fleming spending at the given
    information fractions (default: K equally spaced looks)."""
    times = list(times) if times is not None else [(i + 1) / looks for i in range(looks)]
    walk, bounds, before = _Walk(0.0), [], 0.0
    for t in times:
        target = obf_spent(t, alpha) - before
        c = float(optimize.brentq(lambda c, t=t, target=target: walk.stops(t, c) - target,
                                  0.5, 12.0, xtol=1e-7))
        bounds.append(c)
        walk.advance(t, c)
        before = obf_spent(t, alpha)
    return bounds


def simulate(plan: dict, delta: float, sd: float, draws: int = 20000, seed: int = 0,
             futility: bool = True) -> dict:
    """The plan as it will be run (paired t-tests at the nominal levels, the non-binding
    futility stop taken unless `futility` is False), with normal differences: power against
    `delta` (a significant positive difference), type I error (either side), and the expected
    seeds under each."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, mean in (("power", delta), ("alpha", 0.0)):
        x = rng.normal(mean, sd, size=(draws, plan["looks"][-1]))
        live, wins = np.ones(draws, bool), np.zeros(draws, bool)
        used = np.full(draws, plan["looks"][-1])
        for i, n in enumerate(plan["looks"]):
            m, s = x[:, :n].mean(axis=1), x[:, :n].std(axis=1, ddof=1)
            p = 2 * stats.t.sf(np.abs(m / (s / math.sqrt(n))), n - 1)
            win = live & (p < plan["nominal_p"][i])
            if name == "power":
                win &= m > 0
            stop = win | (futility & live & (m <= 0) & (i < len(plan["looks"]) - 1))
            wins |= win
            used[stop] = n
            live &= ~stop
        out[name] = float(wins.mean())
        out["expected_seeds" + ("" if name == "power" else "_null")] = float(used.mean())
    return out


def design(delta: float, sd: float, every: int, max_seeds: int, alpha: float = 0.05) -> dict:
    """The plan with looks after every `every` seeds up to `max_seeds` (`looks`: seeds read at
    each look): z boundaries, nominal
    p-values, and its power against `delta` (paired SD `sd`) both on the normal approximation
    (efficacy stops only) and simulated as it will be run."""
    seeds = list(range(every, max_seeds + 1, every))
    if seeds[-1] != max_seeds:
        seeds.append(max_seeds)
    times = [n / max_seeds for n in seeds]
    bounds = obf_boundaries(len(seeds), alpha, times)
    theta = delta * math.sqrt(max_seeds) / sd
    plan = {"looks": seeds, "z": bounds,
            "nominal_p": [float(2 * stats.norm.sf(c)) for c in bounds],
            "power_normal": float(sum(_stops(times, bounds, theta))),
            "alpha_normal": float(sum(_stops(times, bounds, 0.0)))}
    plan.update(simulate(plan, delta, sd))
    return plan


def smallest_design(delta: float, sd: float, every: int, power: float = 0.8,
                    alpha: float = 0.05, limit: int = 400) -> dict:
    """The group-sequential plan with the fewest maximum seeds (a multiple of `every`, at least
    two looks) whose simulated power against `delta` is at least `power`."""
    for n in range(2 * every, limit + 1, every):
        plan = design(delta, sd, every, n, alpha)
        if plan["power"] >= power:
            return plan
    raise ValueError(f"no plan up to {limit} seeds reaches power {power}")


def look(differences, plan: dict, index: int) -> dict:
    """The decision at look `index` (0-based) from the paired differences of its seeds:
    `efficacy` (or `harm`, for a negative mean) when the two-sided t-test p-value is below the
    look's nominal level, `futility` (non-binding) when the mean is at most 0 at an interim look,
    else `continue` (at the last look: `not significant`)."""
    d = np.asarray(differences, dtype=float)
    n, last = len(d), index == len(plan["looks"]) - 1
    if n != plan["looks"][index]:
        raise ValueError(f"look {index + 1} reads {plan['looks'][index]} seeds, got {n}")
    p = float(stats.ttest_1samp(d, 0).pvalue)
    if p < plan["nominal_p"][index]:
        verdict = "efficacy" if d.mean() > 0 else "harm"
    elif last:
        verdict = "not significant"
    elif d.mean() <= 0:
        verdict = "futility"
    else:
        verdict = "continue"
    return {"look": index + 1, "seeds": n, "mean": float(d.mean()), "p": p,
            "nominal_p": plan["nominal_p"][index], "verdict": verdict}
