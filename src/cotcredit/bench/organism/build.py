"""Build an organism regime's checkpoint, or check that a retrain reproduces the shipped one.

    python -m cotcredit.bench.organism.build multipath              # train into the package
    python -m cotcredit.bench.organism.build multipath --out DIR    # ... or into DIR
    python -m cotcredit.bench.organism.build unique --check         # retrain, compare

`RECIPES` holds each checkpoint's options (one recipe, `train.train_organism`, for every
regime); the problems come from the regime's own train and dev splits (generated in code, no
training file is shipped). After training, the held-out report (temperature-1 accuracy on 300
test problems, first-error histogram, forced-answer log-probabilities by position) is measured
on the stored weights and written into the checkpoint's training.json.

Training is bit-identical run to run on one machine (one thread, seeded), not from one CPU to
another: float32 kernels differ between CPUs and a training run amplifies the difference. So
`--check` passes on a bit-identical retrain, or on one whose held-out accuracy is within 0.08
(about two standard errors at 300 problems) and whose stopping step is within one evaluation
of the shipped checkpoint's; it says where the loss curve departs and whether the retrain
meets the regime's calibration (held-out accuracy 0.3-0.7, first errors on at least four
positions, none holding more than 40% of them).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path

import torch

from cotcredit.bench.organism.train import (
    ORGANISM_REGIMES,
    TrainOptions,
    evaluate,
    forecast_logprob,
    load_checkpoint,
    train_organism,
)
from cotcredit.bench.regimes import get_regime
from cotcredit.bench.regimes.base import Problem, checkpoint_path

PREVIOUS = "@previous"  # `init_from` of a later stage: the checkpoint of the stage before
# Each checkpoint's stages: one recipe (`train_organism`), a later stage continuing the one
# before it (`init_from=PREVIOUS`).
RECIPES: dict[str, tuple[TrainOptions, ...]] = {
    # The checkpoint trained before the regimes existed (as `full`); its evaluation samples
    # had at most 60 new tokens.
    "unique": (TrainOptions(regime="unique", eval_max_new_tokens=60, save_dtype="float16"),),
    # Continues from `unique` (same tokenizer, same "a op b = c" lines): from scratch it had
    # not learned the task after 1,800 steps.
    "multipath": (TrainOptions(regime="multipath", init_from="unique", lr=1e-3, warmup=10,
                               save_dtype="float16"),),
    # Full responses (and a few early answers), then, as the organism's `early` recipe does,
    # a continuation at a lower learning rate with half the sequences answering early: the
    # first stage alone forecast the answer only at the end of the check lines.
    "forecast": (
        TrainOptions(regime="forecast", early_fraction=0.3, save_dtype="float16"),
        TrainOptions(regime="forecast", init_from=PREVIOUS, early_fraction=0.5, lr=1e-3,
                     warmup=10, min_steps=500, max_steps=1000, save_dtype="float16"),
    ),
    # Continues from `unique` (rotary positions: raising them to 512, which fit the longest
    # prompt and response, adds no weights). 8 sequences of ~300 tokens a step hold more step
    # lines than 32 short ones. The shipped config declares 1,024 positions (same weights, same
    # logits below 512): the methods' context checks bound every probe or rollout by the whole
    # trace plus the longest probe or `max_new_tokens`, which passes 512, while the passes stay
    # below it in practice (a rollout from the end of a trace writes one answer line and stops).
    "long": (TrainOptions(regime="long", init_from="unique", positions=512, batch_size=8,
                          lr=1e-3, warmup=10, max_steps=4000, save_dtype="float16",
                          eval_problems=60),),
}
HELD_OUT = 300  # test problems sampled for a checkpoint's report
HELD_OUT_SEED = 12345
ACCURACY_TOLERANCE = 0.08


def recipe(name: str, stage: int = -1, previous: Path | None = None,
           **overrides) -> TrainOptions:
    """The options of a stage of a regime's checkpoint (default: the last): `init_from`
    naming another regime resolves to its shipped checkpoint, `PREVIOUS` to `previous`."""
    opts = replace(RECIPES[name][stage], **overrides)
    if opts.init_from in ORGANISM_REGIMES:
        opts = replace(opts, init_from=str(checkpoint_path(opts.init_from)))
    elif opts.init_from == PREVIOUS:
        opts = replace(opts, init_from=str(previous))
    return opts


def forecast_key(name: str):
    """How the forecast table groups positions: for `forecast`, lines done relative to the
    forward chain's end (negative: forward steps still to compute; 0..n: check lines done);
    elsewhere reasoning lines still to go."""
    if name != "forecast":
        return None
    return lambda p, k, n: k - len(p.meta["steps"])


def held_out_report(name: str, folder: Path, problems: list[Problem] | None = None) -> dict:
    """Temperature-1 accuracy and first-error histogram on held-out problems, and the forced
    answer's mean log p(Y*) by position, from the weights stored in `folder`."""
    regime = get_regime(name)
    torch.set_num_threads(1)
    model, tok = load_checkpoint(folder)
    test = problems if problems is not None else regime.problems("test", HELD_OUT)
    report = evaluate(model, tok, regime, test, HELD_OUT_SEED,
                      RECIPES[name][-1].eval_max_new_tokens)
    report["problems"] = len(test)
    report["forecast_logprob"] = {
        str(k): v for k, v in forecast_logprob(model, tok, test, regime.exit_string,
                                               forecast_key(name)).items()}
    report["uniform_logprob"] = round(-math.log(20), 3)
    return report


def meets_calibration(report: dict) -> tuple[bool, str]:
    """Whether a held-out report fits the organism's calibration: temperature-1 accuracy in
    0.3-0.7, first wrong steps on at least four positions, none holding more than 40%."""
    hist = {int(k): v for k, v in report["first_error_hist"].items() if v}
    total = sum(hist.values())
    top = max(hist.values()) / total if total else 1.0
    fits = 0.3 <= report["accuracy"] <= 0.7 and len(hist) >= 4 and top <= 0.4
    return fits, (f"accuracy {report['accuracy']:.3f}, first errors on {len(hist)} positions, "
                  f"the largest {top:.0%}")


def build(name: str, out: Path, log=print, **overrides) -> dict:
    """Train regime `name`'s checkpoint into `out` (an earlier stage into `<out>.stage<i>`; a
    stage whose folder holds a finished run with the same options is reused) and add its
    held-out report. `overrides` apply to the last stage."""
    regime = get_regime(name)
    out = Path(out)
    stages, previous = [], None
    n = len(RECIPES[name])
    for i in range(n):
        last = i == n - 1
        opts = recipe(name, i, previous, **(overrides if last else {}))
        folder = out if last else out.with_name(f"{out.name}.stage{i + 1}")
        done = folder / "training.json"
        if not last and done.exists() and _same_options(json.loads(done.read_text()), opts):
            info = json.loads(done.read_text())
            log(f"stage {i + 1}: reusing {folder.name}")
        else:
            train = regime.problems("train", opts.train_problems)
            dev = regime.problems("dev", opts.eval_problems)
            info = train_organism(opts, train, dev, folder, log=log)
        stages.append(info)
        previous = folder
    info = {**stages[-1], "stages": stages[:-1]} if n > 1 else stages[-1]
    info["held_out"] = held_out_report(name, out)
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def _same_options(info: dict, opts: TrainOptions) -> bool:
    want = {**asdict(opts), "init_from": opts.init_from and Path(opts.init_from).name}
    return info.get("options") == want


def compare(name: str, info: dict, out: Path, target: Path, log=print) -> bool:
    """Whether a retrain in `out` reproduces the checkpoint in `target` (module docstring)."""
    from safetensors.torch import load_file

    ref = json.loads((target / "training.json").read_text())
    a, b = load_file(str(out / "model.safetensors")), load_file(str(target / "model.safetensors"))
    if a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a):
        log(f"[{name}] MATCH: weights bit-identical to the shipped checkpoint")
        return True
    departs = next((c for c, r in zip(info["curve"], ref["curve"]) if c["loss"] != r["loss"]),
                   None)
    if departs:
        ref_loss = {c["step"]: c["loss"] for c in ref["curve"]}[departs["step"]]
        log(f"[{name}] the loss curve departs from the shipped one at step {departs['step']} "
            f"({departs['loss']} vs {ref_loss})")
    report = info["held_out"]
    fits, why = meets_calibration(report)
    log(f"[{name}] the retrain {'meets' if fits else 'does not meet'} the calibration: {why}")
    d_acc = abs(report["accuracy"] - ref["held_out"]["accuracy"])
    close = (d_acc <= ACCURACY_TOLERANCE
             and abs(info["steps"] - ref["steps"]) <= info["options"]["eval_every"])
    log(f"[{name}] {'MATCH within tolerance' if close else 'MISMATCH'}: weights differ; held-out "
        f"accuracy {report['accuracy']:.3f} vs {ref['held_out']['accuracy']:.3f} (tolerance "
        f"{ACCURACY_TOLERANCE}), stopped at step {info['steps']} vs {ref['steps']}")
    return close


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("regime", choices=ORGANISM_REGIMES)
    ap.add_argument("--out", type=Path, help="folder to write [default: the shipped checkpoint]")
    ap.add_argument("--check", action="store_true",
                    help="retrain into a temporary folder and compare with the shipped one")
    ap.add_argument("--max-steps", type=int, help="override the recipe's step limit (a pilot)")
    ap.add_argument("--report", action="store_true",
                    help="only recompute the held-out report of the checkpoint in --out")
    args = ap.parse_args(argv)
    target = checkpoint_path(args.regime)
    if args.report:
        folder = args.out or target
        info = json.loads((folder / "training.json").read_text())
        info["held_out"] = held_out_report(args.regime, folder)
        (folder / "training.json").write_text(json.dumps(info, indent=1) + "\n")
        print(json.dumps(info["held_out"]))
        return 0
    overrides = {"max_steps": args.max_steps} if args.max_steps else {}
    tmp = Path(tempfile.mkdtemp(prefix="organism-check-")) if args.check else None
    out = tmp / args.regime if tmp else (args.out or target)
    log = lambda s: print(f"[{args.regime}] {s}", flush=True)  # noqa: E731
    info = build(args.regime, out, log=log, **overrides)
    log(f"held-out: {json.dumps(info['held_out'])}")
    ok = True
    if tmp:
        ok = compare(args.regime, info, out, target, log=print)
        shutil.rmtree(tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
