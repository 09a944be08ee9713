"""Build the organism studies' `early` checkpoint, or check a retrain; its forecast table.

    python -m studies.organism.build             # write studies/organism/model-early/
    python -m studies.organism.build --check     # retrain into a temporary folder and compare
    python -m studies.organism.build --forecast  # only studies/organism/forecast.json

`early` continues the benchmark's `unique` checkpoint (the organism's `full` model, shipped in
the package: `cotcredit.bench.checkpoint("unique")`, rebuilt or checked with `python -m
cotcredit.bench.organism.build unique [--check]`) at a lower learning rate, for at least 200
steps, with half of its sequences stating the final answer after a random number of steps (loss
on the answer only), so it learns to forecast the answer at a step boundary. `--check` compares
as the package's build does (bit-identical weights, or the held-out accuracy within 0.08 and
the stopping step within one evaluation; see `cotcredit.bench.organism.build`). A retrain on
another CPU does not reproduce the weights (float32 kernels differ); what was measured when
that was checked is in retrain.md.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path

from cotcredit.bench import checkpoint, get_regime
from cotcredit.bench.organism.build import compare, held_out_report
from cotcredit.bench.organism.train import (
    TrainOptions,
    forecast_logprob,
    load_checkpoint,
    train_organism,
)
from studies.organism import HERE as ORGANISM

EARLY = TrainOptions(regime="unique", init_from=checkpoint("unique"), early_fraction=0.5, lr=1e-3,
                     warmup=10, min_steps=200, max_steps=800, eval_max_new_tokens=60,
                     save_dtype="float16")


def write_forecast() -> None:
    """forecast.json: mean log p(Y*) of the forced answer after k reference steps, by steps
    still to go, for both checkpoints (uniform over the 20 values: -3.0)."""
    test = get_regime("unique").problems("test", 300)
    out = {"problems": len(test), "uniform": round(-math.log(20), 3)}
    for name, folder in (("model-full", checkpoint("unique")),
                         ("model-early", ORGANISM / "model-early")):
        model, tok = load_checkpoint(folder)
        out[name] = forecast_logprob(model, tok, test)
    (ORGANISM / "forecast.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="retrain and compare with the tracked one")
    ap.add_argument("--forecast", action="store_true", help="only write forecast.json")
    args = ap.parse_args(argv)
    if args.forecast:
        write_forecast()
        return 0
    regime = get_regime("unique")
    tmp = Path(tempfile.mkdtemp(prefix="organism-check-")) if args.check else None
    out = tmp / "model-early" if tmp else ORGANISM / "model-early"
    info = train_organism(EARLY, regime.problems("train", EARLY.train_problems),
                          regime.problems("dev", EARLY.eval_problems), out,
                          log=lambda s: print(f"[early] {s}", flush=True))
    info["held_out"] = held_out_report("unique", out)
    (out / "training.json").write_text(json.dumps(info, indent=1) + "\n")
    print(f"[early] held-out: {json.dumps(info['held_out'])}")
    ok = True
    if tmp:
        ok = compare("early", info, out, ORGANISM / "model-early")
        shutil.rmtree(tmp)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
