"""Group-sequential plans for paired seed differences: looks after every k seeds, Lan-DeMets
O'Brien-Fleming alpha spending (two-sided) for efficacy, beta spending of the same type for a
non-binding futility bound.

Written here because no Python library at hand computes spending-function boundaries (R's
gsDesign and rpact do); the method is the standard recursive numerical integration of the
score statistic's density over the continuation region (Armitage, McPherson and Rowe 1969;
Jennison and Turnbull 2000, ch. 19). Tests check it against gsDesign's published boundaries
and by simulation.

On the z scale: S_k = Z_k sqrt(t_k) is a Brownian motion in the information fraction t with
drift theta = delta sqrt(N) / sigma at full information (N seeds). A look at n seeds puts the
paired t statistic on the z scale by its tail (`t_to_z`) and compares it with the bounds. The
futility bound is non-binding: the efficacy bounds are computed as if it did not exist, so
ignoring it never raises the type I error. The plan's power is simulated as it will be run
(t-tests, futility stops taken); the maximum seeds are the fewest that reach the power there.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats

GRID = 801  # points over the continuation region; boundaries agree with published ones to 1e-3
CAP = 12.0  # the largest z boundary: a look that may spend less than P(|Z| > 12) spends nothing


def ldof_spent(t: float, level: float) -> float:
    """One-sided `level` spent by information fraction t, Lan-DeMets O'Brien-Fleming type:
    2 - 2 Phi(z_{1-level/2} / sqrt(t)) (gsDesign's `sfLDOF`, rpact's `asOF`)."""
    if t <= 0:
        return 0.0
    return float(2 - 2 * stats.norm.cdf(stats.norm.ppf(1 - level / 2) / math.sqrt(t)))


def obf_spent(t: float, alpha: float = 0.05) -> float:
    """Two-sided alpha spent by fraction t: `ldof_spent` at alpha / 2 on each side."""
    return 2 * ldof_spent(t, alpha / 2)


def _weights(s: np.ndarray) -> np.ndarray:
    w = np.full(len(s), s[1] - s[0])
    w[[0, -1]] /= 2  # trapezoid rule
    return w


class _Walk:
    """The score statistic's density on the continuation region, look by look (a look's
    region is lo < Z < hi on the z scale)."""

    def __init__(self, drift: float):
        self.drift, self.f, self.s, self.t = drift, None, None, 0.0

    def stops(self, t: float, lo: float, hi: float) -> tuple[float, float]:
        """Chance of stopping above `hi` and below `lo` at a look at fraction t."""
        a, b, dt = lo * math.sqrt(t), hi * math.sqrt(t), t - self.t
        sd, shift = math.sqrt(dt), self.drift * dt
        if self.f is None:
            return (float(stats.norm.sf((b - shift) / sd)),
                    float(stats.norm.cdf((a - shift) / sd)))
        w = self.f * _weights(self.s)
        return (float(w @ stats.norm.sf((b - self.s - shift) / sd)),
                float(w @ stats.norm.cdf((a - self.s - shift) / sd)))

    def advance(self, t: float, lo: float, hi: float) -> None:
        """Continue past a look at fraction t with region (lo, hi)."""
        a, b, dt = lo * math.sqrt(t), hi * math.sqrt(t), t - self.t
        sd, shift = math.sqrt(dt), self.drift * dt
        new = np.linspace(a, b, GRID)
        if self.f is None:
            self.f = stats.norm.pdf((new - shift) / sd) / sd
        else:
            kernel = stats.norm.pdf((new[:, None] - self.s[None, :] - shift) / sd) / sd
            self.f = kernel @ (self.f * _weights(self.s))
        self.s, self.t = new, t


def _root(f, target: float, lo: float, hi: float) -> float:
    """c in [lo, hi] with f(c) = target for f monotone on it; an end when out of reach."""
    if (f(lo) - target) * (f(hi) - target) > 0:
        return lo if abs(f(lo) - target) < abs(f(hi) - target) else hi
    return float(optimize.brentq(lambda c: f(c) - target, lo, hi, xtol=1e-7))


def obf_boundaries(looks: int, alpha: float = 0.05, times=None) -> list[float]:
    """Two-sided z boundaries c_1..c_K of Lan-DeMets O'Brien-Fleming spending at the given
    information fractions (default: K equally spaced looks)."""
    times = list(times) if times is not None else [(i + 1) / looks for i in range(looks)]
    walk, bounds = _Walk(0.0), []
    for i, t in enumerate(times):
        target = obf_spent(t, alpha) - obf_spent(times[i - 1] if i else 0.0, alpha)
        # at a look that may spend (almost) nothing the boundary is CAP
        c = _root(lambda c, t=t: sum(walk.stops(t, -c, c)), target, 0.5, CAP)
        bounds.append(c)
        walk.advance(t, -c, c)
    return bounds


def futility_boundaries(times, upper, drift: float, beta: float = 0.2) -> list[float]:
    """Lower z boundaries a_1..a_K (non-binding futility) by beta spending, Lan-DeMets
    O'Brien-Fleming type: under the alternative (`drift`), the chance of stopping below a_k at
    look k is the beta spent between looks k-1 and k; the last look's a_K is its upper bound."""
    walk, lower = _Walk(drift), []
    for i, (t, c) in enumerate(zip(times, upper)):
        if i == len(times) - 1:
            a = c
        else:
            target = ldof_spent(t, beta) - ldof_spent(times[i - 1] if i else 0.0, beta)
            a = min(_root(lambda a, t=t, c=c: walk.stops(t, a, c)[1], target, -c, c), c)
        lower.append(max(a, -c))
        walk.advance(t, lower[-1], c)
    return lower


def _crossings(times, lower, upper, drift: float) -> list[tuple[float, float]]:
    """Per look, the chance of stopping above and below the region (lower, upper)."""
    walk, out = _Walk(drift), []
    for t, a, c in zip(times, lower, upper):
        out.append(walk.stops(t, a, c))
        walk.advance(t, a, c)
    return out


def t_to_z(mean, sd, n):
    """The z with the same one-sided tail as the paired t statistic of n differences (so a
    look compares t-tests with z boundaries at their nominal levels)."""
    t = np.asarray(mean) / (np.asarray(sd) / math.sqrt(n))
    return stats.norm.isf(stats.t.sf(t, n - 1))


def simulate(plan: dict, delta: float, sd: float, draws: int = 20000, seed: int = 0,
             futility: bool = True) -> dict:
    """The plan as it will be run (paired t-tests against the z boundaries, the non-binding
    futility stop taken unless `futility` is False), with normal differences: power against
    `delta` (stopping above), type I error (stopping above or below -z), and the expected
    seeds under each."""
    rng = np.random.default_rng(seed)
    out, last = {}, len(plan["looks"]) - 1
    for name, mean in (("power", delta), ("alpha", 0.0)):
        x = rng.normal(mean, sd, size=(draws, plan["looks"][-1]))
        live, wins = np.ones(draws, bool), np.zeros(draws, bool)
        used = np.full(draws, plan["looks"][-1])
        for i, n in enumerate(plan["looks"]):
            z = t_to_z(x[:, :n].mean(axis=1), x[:, :n].std(axis=1, ddof=1), n)
            c, a = plan["z"][i], plan["futility_z"][i]
            win = live & ((z >= c) if name == "power" else (np.abs(z) >= c))
            stop = win | (live & (z <= -c))
            if futility and i < last:
                stop |= live & (z <= a)
            wins |= win
            used[stop] = n
            live &= ~stop
        out[name] = float(wins.mean())
        out["expected_seeds" + ("" if name == "power" else "_null")] = float(used.mean())
    return out


def design(delta: float, sd: float, every: int, max_seeds: int, alpha: float = 0.05,
           beta: float = 0.2) -> dict:
    """The plan with looks after every `every` seeds up to `max_seeds` (`looks`: seeds read at
    each look): efficacy z boundaries (two-sided alpha spending) and their nominal p-values,
    futility z boundaries (beta spending against `delta` with paired SD `sd`), and its power
    and expected seeds, on the normal scale and simulated as it will be run."""
    seeds = list(range(every, max_seeds + 1, every))
    if seeds[-1] != max_seeds:
        seeds.append(max_seeds)
    times = [n / max_seeds for n in seeds]
    upper = obf_boundaries(len(seeds), alpha, times)
    theta = delta * math.sqrt(max_seeds) / sd
    lower = futility_boundaries(times, upper, theta, beta)
    plan = {"looks": seeds, "z": upper, "futility_z": lower,
            "nominal_p": [float(2 * stats.norm.sf(c)) for c in upper],
            "delta": delta, "sd": sd, "alpha_spent": alpha, "beta_spent": beta,
            "power_normal": float(sum(u for u, _ in _crossings(times, lower, upper, theta))),
            "alpha_normal": float(sum(u + d for u, d in _crossings(
                times, [-c for c in upper], upper, 0.0)))}
    plan.update(simulate(plan, delta, sd))
    return plan


def smallest_design(delta: float, sd: float, every: int, power: float = 0.8,
                    alpha: float = 0.05, limit: int = 400) -> dict:
    """The group-sequential plan with the fewest maximum seeds (a multiple of `every`, at least
    two looks) whose simulated power against `delta` is at least `power`."""
    for n in range(2 * every, limit + 1, every):
        plan = design(delta, sd, every, n, alpha, 1 - power)
        if plan["power"] >= power:
            return plan
    raise ValueError(f"no plan up to {limit} seeds reaches power {power}")


def repeated_interval(differences, c: float, bounds=(-1.0, 1.0)) -> tuple[float, float]:
    """The repeated confidence interval at a look whose two-sided efficacy boundary is `c`
    (Jennison and Turnbull): the means the look's test would not reject, mean +- q se with q
    the t quantile of the boundary's nominal tail (`t_to_z` inverted). Over all looks together
    they cover the true mean with the design's 1 - alpha, whenever the study stops; clipped to
    `bounds`, the range a difference of rewards in [0, 1] can take."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    half = float(stats.t.isf(stats.norm.sf(c), n - 1)) * d.std(ddof=1) / math.sqrt(n)
    return max(bounds[0], d.mean() - half), min(bounds[1], d.mean() + half)


def look(differences, plan: dict, index: int) -> dict:
    """The decision at look `index` (0-based) from the paired differences of its seeds (their
    t statistic on the z scale, `t_to_z`): `efficacy` at or above the look's z boundary,
    `harm` at or below minus it, `futility` (non-binding) at or below its futility boundary
    before the last look, else `continue` (at the last look: `not significant`)."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n != plan["looks"][index]:
        raise ValueError(f"look {index + 1} reads {plan['looks'][index]} seeds, got {n}")
    z = float(t_to_z(d.mean(), d.std(ddof=1), n))
    c, a = plan["z"][index], plan["futility_z"][index]
    low, high = repeated_interval(d, c)
    return {"look": index + 1, "seeds": n, "mean": float(d.mean()), "z": z,
            "p": float(stats.ttest_1samp(d, 0).pvalue), "z_bound": c, "futility_z": a,
            "verdict": verdict(z, plan, index), "rci_low": float(low), "rci_high": float(high)}


def verdict(z: float, plan: dict, index: int) -> str:
    """The plan's decision for a z statistic at look `index` (0-based); see `look`."""
    c = plan["z"][index]
    if z >= c:
        return "efficacy"
    if z <= -c:
        return "harm"
    if index == len(plan["looks"]) - 1:
        return "not significant"
    return "futility" if z <= plan["futility_z"][index] else "continue"
