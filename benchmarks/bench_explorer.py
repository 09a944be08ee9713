"""The trace explorer at scale: size of the page and how fast Chromium opens and filters it.

    python benchmarks/bench_explorer.py [--traces 10000] [--segments 16] [--chars 80]
                                        [--repeats 3] [--out DIR] [--no-browser]
    python benchmarks/bench_explorer.py --screenshot PNG [--traces 40]
                                        [--tables T.parquet ... --traces-file TRACES.jsonl]

The docs' figure (docs/assets/explorer.png) is the lookup study's tables (`make lookup-study`):

    python benchmarks/bench_explorer.py --screenshot docs/assets/explorer.png \\
        --tables studies/lookup_study/{rredcot,mc,attr}.parquet \\
        --traces-file studies/lookup_study/traces.jsonl

Protocol (fixed before measuring). Synthetic score tables shaped like `compare`'s (five methods:
rredcot with g_before/g_after and an outcome, mc with value_before/value_after/stderr, loo,
shapley, gradient-ig; error labels on 40% of the traces, "no error" on 30%; one prompt per 4
traces; segment texts of ~`--chars` characters) are written as one explorer with no cap. Printed:

* build: seconds for ``write_explorer`` (data, page and write);
* size: bytes of the page, bytes per segment, and bytes per segment besides the texts (the page
  with every text emptied, over the same segments);
* in Chromium (Debian's ``chromium`` driven by Playwright, headless; median of ``--repeats``
  fresh pages): ``load``, from navigation start to the page's first render (the list and the
  first trace drawn: ``data-ready-ms``); then, on that page, ``filter`` (outcome = wrong),
  ``search`` (a word of the texts: a full-text scan, the first one also lower-cases every
  text once), ``search again`` (another word), ``sort`` (by min ρ) and ``next trace``
  (the ``j`` key), each the browser-side milliseconds of the synchronous work.

Goal: the 10,000-trace × 16-segment × 5-method page opens in a few seconds and filters in well
under a second. Timings are wall-clock on a shared machine: noisy, compare within one run.
``--screenshot`` writes a PNG of an explorer (the docs' figure) instead of measuring.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from cotcredit.report.explorer import explorer_data, render_explorer, write_explorer

#: What the tests and this script give Chromium: no network, no profile chores.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
DEBIAN_CHROMIUM = "/usr/bin/chromium"
METHODS = ("rredcot", "mc", "loo", "shapley", "gradient-ig")
NOISE = {"rredcot": 0.6, "mc": 0.4, "loo": 0.9, "shapley": 0.8, "gradient-ig": 1.5}
WORDS = ("so", "the", "total", "is", "wait", "check", "again", "apples", "cost", "5", "and",
         "oranges", "7", "then", "12", "<b>", "&", "table", "row", "value", "let", "me", "add")


def chromium_path() -> str | None:
    """Debian's Chromium (``apt-get install chromium``): on PATH, else where the package puts
    it; None when absent."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None and Path(DEBIAN_CHROMIUM).is_file():
        found = DEBIAN_CHROMIUM
    return found


def launch_chromium(playwright):
    """Headless Debian Chromium through Playwright (nothing downloaded); None when absent."""
    exe = chromium_path()
    if exe is None:
        return None
    return playwright.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)


def synthetic_scores(n_traces: int, n_segments: int = 16, methods=METHODS, chars: int = 80,
                     seed: int = 0, min_segments: int | None = None
                     ) -> tuple[pd.DataFrame, list[dict]]:
    """Score rows of ``methods`` on ``n_traces`` traces of ``min_segments``..``n_segments``
    segments (default: all ``n_segments``), a shared signal plus method noise, and the traces'
    records (id, prompt, response, outcome)."""
    rng = np.random.default_rng(seed)
    n, k = n_traces, n_segments
    ks = rng.integers(min_segments or k, k + 1, size=n)
    words = np.array(WORDS, dtype=object)
    draws = rng.integers(0, len(words), size=(n * k, max(1, chars // 5)))
    texts = np.array([" ".join(words[row]) + ".\n" for row in draws], dtype=object)
    keep = (np.arange(k)[None, :] < ks[:, None]).ravel()
    lengths = np.where(keep, [len(x) for x in texts], 0).reshape(n, k)
    ends = np.cumsum(lengths, axis=1)
    starts = ends - lengths
    ids = np.array([f"trace-{i:05d}" for i in range(n)], dtype=object)
    responses = ["".join(texts[i * k:i * k + ks[i]]) + f"The answer is {i % 97}."
                 for i in range(n)]
    outcome = (rng.random(n) < 0.5).astype("float64")
    status = rng.random(n)
    wrong = starts[np.arange(n), rng.integers(0, ks)] + 2
    error = np.where(status < 0.4, wrong, np.where(status < 0.7, -1, -2))  # -2: unknown
    signal = rng.normal(size=(n, k))
    base = pd.DataFrame({
        "run_id": "bench", "trace_id": np.repeat(ids, k), "segment": np.tile(np.arange(k), n),
        "char_start": starts.ravel(), "char_end": ends.ravel(),
        "token_start": np.tile(np.arange(k) * 4, n), "token_end": np.tile(np.arange(k) * 4 + 4, n),
        "n_tokens": 4, "text": texts,
        "error_char": pd.array(np.repeat(error, k), dtype="Int64"),
    })
    base.loc[base["error_char"] == -2, "error_char"] = pd.NA
    frames = []
    for m in methods:
        score = signal + NOISE.get(m, 1.0) * rng.normal(size=(n, k))
        part = base.assign(method=m, score=score.ravel())
        if m in ("rredcot", "mc"):
            v = np.concatenate([rng.random((n, 1)), score / 8], axis=1).cumsum(axis=1)
            v = 1 / (1 + np.exp(-v)) if m == "mc" else v
            before, after = ("g_before", "g_after") if m == "rredcot" else ("value_before",
                                                                          "value_after")
            part[before], part[after] = v[:, :-1].ravel(), v[:, 1:].ravel()
            if m == "mc":
                part["stderr"] = np.sqrt(v[:, 1:] * (1 - v[:, 1:]) / 16).ravel()
            else:
                part["outcome"] = np.repeat(outcome, k)
        frames.append(part[keep])
    question = "What do apples and oranges cost together? Read the table first. " * 4
    traces = [{"id": ids[i], "prompt": f"Problem {i // 4}. {question}", "response": responses[i],
               "outcome": float(outcome[i])} for i in range(n)]
    return pd.concat(frames, ignore_index=True), traces


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def measure_browser(page_path: Path, repeats: int) -> dict[str, float]:
    """Browser-side milliseconds of load and of each interaction (median of ``repeats``)."""
    from playwright.sync_api import sync_playwright

    times: dict[str, list[float]] = {}
    with sync_playwright() as p:
        browser = launch_chromium(p)
        if browser is None:
            raise SystemExit("chromium not found: apt-get install chromium")
        for _ in range(repeats):
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            errors: list[str] = []
            page.on("pageerror", lambda e, errors=errors: errors.append(str(e)))
            t0 = time.perf_counter()
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("body[data-ready=true]", timeout=120_000)
            wall = (time.perf_counter() - t0) * 1000
            times.setdefault("load (wall, incl. reading the file)", []).append(wall)
            times.setdefault("load", []).append(float(page.get_attribute("body", "data-ready-ms")))
            timed = {
                "filter": "const s = document.getElementById('f-outcome'); s.value = 'wrong';"
                          "s.dispatchEvent(new Event('input'));",
                "search": "const s = document.getElementById('f-search'); s.value = 'wait';"
                          "s.dispatchEvent(new Event('input'));"
                          "s.dispatchEvent(new Event('change'));",
                "search again": "const s = document.getElementById('f-search'); s.value = 'apples';"
                                "s.dispatchEvent(new Event('input'));"
                                "s.dispatchEvent(new Event('change'));",
                "sort": "document.querySelector('.sort[data-key=min_rho]').click();",
                "next trace": "document.dispatchEvent(new KeyboardEvent('keydown', {key: 'j'}));",
            }
            for name, js in timed.items():
                ms = page.evaluate(f"() => {{ const t0 = performance.now(); {js}"
                                   " return performance.now() - t0; }")
                times.setdefault(name, []).append(ms)
            if errors:
                raise SystemExit(f"page errors: {errors}")
            page.close()
        browser.close()
    return {k: _median(v) for k, v in times.items()}


def screenshot(path: Path, n_traces: int, tables: list[Path] | None = None,
               traces_file: Path | None = None) -> None:
    """A PNG of an explorer (the docs' and README's figure): 1280 x 800, the first wrong trace
    with a labelled error open, its error segment focused (scores shown), reduced to a 256-colour
    palette to stay small. From ``tables`` (and their traces file) when given, else from a
    small synthetic set."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    if tables:
        from cotcredit.data import read_traces
        from cotcredit.pipeline.scores import load_scores

        scores = load_scores(tables)
        traces = read_traces(traces_file).traces if traces_file else None
    else:
        scores, traces = synthetic_scores(n_traces, 10, METHODS[:4], chars=50, seed=3)
    with tempfile.TemporaryDirectory() as tmp:
        page_path = write_explorer(scores, traces, Path(tmp) / "explorer.html").path
        with sync_playwright() as p:
            browser = launch_chromium(p)
            if browser is None:
                raise SystemExit("chromium not found: apt-get install chromium")
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("body[data-ready=true]")
            page.select_option("#f-error", "labelled")
            page.select_option("#f-outcome", "wrong")
            page.click("#grid-body .row")  # the first wrong trace with a labelled error
            page.click("#prompt-box summary")  # folded: the reasoning and curves in view
            page.focus("#reasoning .seg.error")
            page.screenshot(path=str(Path(tmp) / "shot.png"), type="png")
            browser.close()
        image = Image.open(Path(tmp) / "shot.png").convert("RGB")
        path.parent.mkdir(parents=True, exist_ok=True)
        image.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    print(f"wrote {path} ({path.stat().st_size / 1000:.0f} kB)")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--traces", type=int, default=10_000)
    ap.add_argument("--segments", type=int, default=16)
    ap.add_argument("--chars", type=int, default=80, help="characters per segment text")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="keep the page in this folder")
    ap.add_argument("--no-browser", action="store_true", help="size and build time only")
    ap.add_argument("--max-bytes", type=int, default=None,
                    help="the page's size cap (default: none, every trace)")
    ap.add_argument("--screenshot", type=Path, default=None, help="write a PNG of an explorer")
    ap.add_argument("--tables", type=Path, nargs="+", default=None,
                    help="--screenshot: score tables to show (default: synthetic)")
    ap.add_argument("--traces-file", type=Path, default=None,
                    help="--screenshot: the tables' traces file (prompts, final answers)")
    args = ap.parse_args(argv)
    if args.screenshot is not None:
        screenshot(args.screenshot, min(args.traces, 40), args.tables, args.traces_file)
        return

    scores, traces = synthetic_scores(args.traces, args.segments, chars=args.chars)
    out = args.out or Path(tempfile.mkdtemp(prefix="explorer-bench-"))
    t0 = time.perf_counter()
    written = write_explorer(scores, traces, out / "explorer.html", max_bytes=args.max_bytes)
    build = time.perf_counter() - t0
    n_seg = written.kept * args.segments
    data = explorer_data(scores, traces, max_bytes=args.max_bytes)
    data["trace"]["text"] = [""] * len(data["trace"]["text"])
    data["prompts"] = [""] * len(data["prompts"])
    bare = len(render_explorer(data).encode("utf-8"))
    print(f"{args.traces:,} traces x {args.segments} segments x {len(METHODS)} methods "
          f"({len(scores):,} score rows), ~{args.chars} chars per segment")
    print(f"build        {build:6.2f} s   (write_explorer; {written.kept:,} traces kept)")
    print(f"size         {written.n_bytes / 1e6:6.2f} MB  = {written.n_bytes / n_seg:.0f} bytes "
          f"per segment; {bare / n_seg:.0f} bytes per segment without the texts")
    if not args.no_browser:
        for name, ms in measure_browser(written.path, args.repeats).items():
            print(f"{name:<12} {ms:6.0f} ms" if "wall" not in name else f"{name}: {ms:.0f} ms")
    print(f"page: {written.path}")


if __name__ == "__main__":
    sys.exit(main())
