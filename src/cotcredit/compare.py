"""`compare`: run several methods on one shared segmentation, then correlate their scores."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cotcredit.errors import UserError
from cotcredit.lm import Scorer
from cotcredit.methods import get_method, registry
from cotcredit.options import build_options, parse_sets, read_config
from cotcredit.pipeline import SEGMENTS, InputOptions, RunSummary, run_analysis
from cotcredit.report import Correlations, ReportFiles, correlate, load_scores, write_report
from cotcredit.segmentation import SegmentOptions


@dataclass
class CompareResult:
    scores: Any  # pandas DataFrame of all methods' rows
    correlations: Correlations
    files: ReportFiles


def method_options(methods: str | list[str], config: Path | None = None, sets: list[str] | None = None,
                   **shortcuts: Any) -> dict[str, Any]:
    """Options per method from a config file, `--set` items and a few CLI shortcuts."""
    names = [m.strip() for m in methods.split(",")] if isinstance(methods, str) else list(methods)
    names = list(dict.fromkeys(n for n in names if n))
    if not names:
        raise UserError("--methods: name at least one method")
    resolved = []
    for n in names:
        spec = get_method(n)  # accepts labels such as gradient-ig
        if spec.name not in resolved:
            resolved.append(spec.name)
    mapping: dict[str, dict[str, Any]] = {n: {} for n in resolved}
    if config is not None:
        for name, opts in read_config(config).items():
            if name not in registry():
                raise UserError(f"{config}: unknown method '{name}' (known: {', '.join(registry())})")
            if name in mapping:
                mapping[name].update(opts)
    for name, opts in parse_sets(sets).items():
        if name not in mapping:
            raise UserError(f"--set {name}.…: method '{name}' is not among --methods")
        mapping[name].update(opts)
    short = {"rollouts": ("mc", "rollouts"), "max_new_tokens": ("mc", "max_new_tokens"),
             "shapley_samples": ("shapley", "samples")}
    for key, value in shortcuts.items():
        if value is not None and short[key][0] in mapping:
            mapping[short[key][0]][short[key][1]] = value
    kinds = [n.split("-", 1)[1] for n in names if n.startswith("gradient-")]
    if kinds and "kinds" not in mapping.get("gradient", {}):
        mapping["gradient"]["kinds"] = ",".join(kinds)
    return {n: build_options(get_method(n).options_type, mapping[n], n) for n in resolved}


def run_methods(traces, scorer: Scorer, options: dict[str, Any], out_dir: Path, *,
                segment_options: SegmentOptions | None = None, segments_file: Path | None = None,
                inputs: InputOptions | None = None, overwrite: bool = False,
                progress: bool = False) -> tuple[RunSummary, list[Path]]:
    """Run every method on one segmentation per trace; one Parquet file per method in out_dir."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"{out_dir}: exists and is not a folder")
    outputs = {SEGMENTS: out_dir / "segments.parquet"}
    outputs.update({name: out_dir / f"{name}.parquet" for name in options})
    summary = run_analysis(traces, scorer, methods=options, segment_options=segment_options,
                           segments_file=segments_file, outputs=outputs, inputs=inputs,
                           overwrite=overwrite, progress=progress, keep_rows=False)
    return summary, [outputs[name] for name in options]


def compare_scores(paths: list[Path], out_dir: Path, *, reference: str = "mc", n_boot: int = 2000,
                   min_segments: int = 3, seed: int = 0) -> CompareResult:
    """Load score files (refusing mismatched segmentations), correlate, write the report."""
    scores = load_scores(paths)
    corr = correlate(scores, n_boot=n_boot, seed=seed, min_segments=min_segments, reference=reference)
    files = write_report(scores, corr, Path(out_dir), notes={"score files": ", ".join(map(str, paths))})
    return CompareResult(scores, corr, files)


def compare(traces, methods: str | list[str] = "rredcot,mc,loo", out_dir: str | Path = "report", *,
            scorer: Scorer | None = None, config: Path | None = None, reference: str = "mc",
            **kwargs: Any) -> CompareResult:
    """Python API of `cotcredit compare`: run methods, write their tables and the report."""
    from cotcredit.lm import load_scorer

    opts = method_options(methods, config)
    _, files = run_methods(traces, scorer or load_scorer(), opts, Path(out_dir), **kwargs)
    return compare_scores(files, Path(out_dir), reference=reference)
