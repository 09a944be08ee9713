"""Which methods the benchmark runs, and with which options: registered methods and named
variants of them.

A variant is a row label with a method and options, so two settings of one method stand side by
side on the leaderboard. Variants come from a YAML/TOML/JSON file (``--config``)::

    rredcot-rhat: {method: rredcot, value: rhat}        # a variant: its own label
    rredcot-norm: {method: rredcot, length_norm: true}
    loo: {baseline_text: "..."}                          # a registered method's own options

``DEFAULT_VARIANTS`` are always known, each with its value options in full so that a row
computes the same estimator whatever the method's defaults are: ``rredcot``, RREDCoT's default
(R̂ + v̂ over every known path, matched by content, the last boundary counted once; chosen in
studies/value/); ``rredcot-one-reference``, R̂ + v̂ over the one reference's remaining steps (the
earlier default); and ``rredcot-rhat``, R̂ alone. Every
registered method (``cotcredit.methods.registry``: the package's and those registered by entry
point) is benchmarked by name with nothing else to add. Per regime, the answer-forcing exit
string of every method that forces an answer is the regime's (unless the options set one), and
Monte Carlo samples with the regime's sampling settings and the size's rollouts.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cotcredit.errors import UserError
from cotcredit.methods import get_method, registry
from cotcredit.options import build_options, comma_list, read_config

#: RREDCoT's v̂ over its one reference's steps covered by position (the earlier default).
ONE_REFERENCE: dict[str, Any] = {"references": "solution", "solution_part": "remaining",
                                 "empty_part": "keep"}
#: RREDCoT's default v̂: every known path, matched by content, the empty part dropped.
KNOWN_PATHS: dict[str, Any] = {"references": "siblings", "solution_part": "matched",
                               "empty_part": "drop"}
#: Variants every bench knows: the row ``rredcot`` is the method's default, named in full.
DEFAULT_VARIANTS: dict[str, dict[str, Any]] = {
    "rredcot": {"method": "rredcot", "value": "both", **KNOWN_PATHS},
    "rredcot-one-reference": {"method": "rredcot", "value": "both", **ONE_REFERENCE},
    "rredcot-rhat": {"method": "rredcot", "value": "rhat"},
}
#: Row labels of the runs made before the rename (their tables) -> the labels of today.
RENAMED = {"rredcot": "rredcot-one-reference", "rredcot-siblings": "rredcot"}
#: The Monte Carlo method, the reference of MC tracking.
REFERENCE = "mc"


@dataclass(frozen=True)
class MethodRun:
    """One row label to benchmark: the registered method that makes it and its option mapping
    (built into the method's options per regime)."""

    label: str
    method: str
    options: Mapping[str, Any]

    def labels(self) -> list[str]:
        """The row labels this run writes (``gradient`` writes one per kind)."""
        spec = get_method(self.method)
        built = build_options(spec.options_type, dict(self.options), self.label)
        own = spec.labels(built)
        if self.label == self.method:
            return list(own)
        return [self.label] if len(own) == 1 else [self.label + lab[len(self.method):]
                                                    for lab in own]

    def check(self) -> None:
        """Check the options as a run will (a missing extra, such as shap for shapley, is a
        one-line error before any model loads)."""
        built = build_options(get_method(self.method).options_type, dict(self.options), self.label)
        if hasattr(built, "validate"):
            built.validate()

    def rename(self) -> dict[str, str]:
        """Row label of the method -> row label written (empty for the method itself)."""
        if self.label == self.method:
            return {}
        spec = get_method(self.method)
        own = spec.labels(build_options(spec.options_type, dict(self.options), self.label))
        return dict(zip(own, self.labels(), strict=True))


def read_variants(config: str | Path | None) -> dict[str, dict[str, Any]]:
    """``DEFAULT_VARIANTS`` updated from a config file (label -> {method?, options...}); options
    given for a default variant of the same method are set on top of its own."""
    found = {k: dict(v) for k, v in DEFAULT_VARIANTS.items()}
    if config is None:
        return found
    for label, opts in read_config(Path(config)).items():
        label = str(label)
        # a known variant's own method unless the config names another
        method = str(opts.get("method", found.get(label, {}).get("method", label)))
        if method not in registry():
            raise UserError(f"{config}: {label}: unknown method {method!r} (known: "
                            f"{', '.join(registry())})")
        base = found.get(label, {})
        base = base if base.get("method") == method else {}
        found[label] = {**base, "method": method,
                        **{k: v for k, v in opts.items() if k != "method"}}
    return found


def default_methods(variants: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every registered method that runs on its default options (`MethodSpec.
    runs_with_defaults`; the others run when named, with their options) and every variant,
    Monte Carlo included."""
    own = [name for name, spec in registry().items() if spec.runs_with_defaults]
    return list(dict.fromkeys([*own, *variants]))


def method_runs(methods: str | Sequence[str] | None,
                variants: Mapping[str, Mapping[str, Any]]) -> list[MethodRun]:
    """The runs of ``methods`` (names or variant labels; None: ``default_methods``), Monte
    Carlo always among them (it is MC tracking's reference). Options are checked here, before
    any model loads."""
    if methods is None:
        names = default_methods(variants)
    else:
        names = comma_list(methods)
    if REFERENCE not in names:
        names.append(REFERENCE)
    runs = []
    for name in names:
        if name in variants:
            opts = dict(variants[name])
            method = str(opts.pop("method", name))
        elif name in registry():
            method, opts = name, {}
        else:
            known = ", ".join([*registry(), *(v for v in variants if v not in registry())])
            raise UserError(f"--methods: unknown method or variant {name!r} (known: {known})")
        run = MethodRun(name, method, opts)
        run.labels()  # builds the options: a bad option is a one-line error now
        run.check()
        runs.append(run)
    return runs


def _set_if_absent(cls: type, mapping: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """``mapping`` with ``key`` set when the options class has such a field (at any depth) and
    the mapping does not already name it."""
    if any(k.replace("-", "_").split(".")[-1] == key for k in mapping):
        return mapping
    try:
        build_options(cls, {key: value})
    except UserError:
        return mapping  # no such option
    return {**mapping, key: value}


def regime_options(run: MethodRun, exit_string: str | None, sampling: Mapping[str, Any],
                   rollouts: int, seed: int, save_rollouts: Path | None = None) -> Any:
    """The options object of ``run`` on a regime: its exit string, and for Monte Carlo the
    regime's sampling settings, ``rollouts`` and the rollouts table."""
    spec = get_method(run.method)
    opts = dict(run.options)
    if exit_string is not None:  # None: the method's own answer forcing (a user's traces)
        opts = _set_if_absent(spec.options_type, opts, "exit_string", exit_string)
    if run.method == REFERENCE:
        for key, value in {**dict(sampling), "rollouts": rollouts, "seed": seed}.items():
            opts = _set_if_absent(spec.options_type, opts, key, value)
        built = build_options(spec.options_type, opts, run.label)
        if save_rollouts is not None and hasattr(built, "save_rollouts"):
            built = dataclasses.replace(built, save_rollouts=str(save_rollouts))
        return built
    return build_options(spec.options_type, opts, run.label)


#: Registered methods that read no solution (the trace, the model and the answer only).
READS_NO_SOLUTION = ("mc", "loo", "shapley", "gradient")


def reads(run: MethodRun) -> str:
    """What a row reads (``cotcredit.bench.pairing.READS``), which decides its baseline: a
    method's options may say (a ``reads`` class attribute naming the class, or a ``reads()``
    method computing it from the options); Monte Carlo, leave-one-out, Shapley and gradients
    read no solution; a method with a ``references`` option (RREDCoT) reads those paths unless
    it computes R̂ alone (``value: rhat`` or a v̂ weight of 0); any other method is taken to
    read everything (``siblings``), so that it meets the strongest baseline, never a weaker
    one."""
    spec = get_method(run.method)
    built = build_options(spec.options_type, dict(run.options), run.label)
    declared = getattr(built, "reads", None)
    if callable(declared):
        return str(declared())
    if isinstance(declared, str):
        return declared
    if run.method in READS_NO_SOLUTION:
        return "none"
    references = getattr(built, "references", None)
    if references is None:
        return "siblings"
    if getattr(built, "value", "both") == "rhat" or getattr(built, "vhat_weight", 1.0) == 0:
        return "none"
    return str(references)


def with_sets(variants: Mapping[str, Mapping[str, Any]], sets: Sequence[str] | None
              ) -> dict[str, dict[str, Any]]:
    """``variants`` with ``--set LABEL.OPTION=VALUE`` items on top: a variant's label sets its
    options, a registered method's name its own row's."""
    from cotcredit.options import parse_sets

    found = {k: dict(v) for k, v in variants.items()}
    for label, opts in parse_sets(list(sets or [])).items():
        if label not in found and label not in registry():
            known = ", ".join([*registry(), *(v for v in found if v not in registry())])
            raise UserError(f"--set {label}.…: unknown method or variant {label!r} (known: "
                            f"{known})")
        found[label] = {**found.get(label, {"method": label}), **opts}
    return found
