"""The trace explorer: the page's data equals the tables, texts are escaped, the cap keeps the
traces it says, size grows linearly; and, in a real browser (Debian's chromium driven by
Playwright), the page sorts, filters, opens traces, shades segments with the tables' credits and
answers the keyboard without a console error."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, not_installed
from scipy import stats

from cotcredit.report.explorer import (
    EXPLORER_FILE,
    explorer_data,
    read_explorer_data,
    render_explorer,
    write_explorer,
)

_spec = importlib.util.spec_from_file_location("bench_explorer",
                                               ROOT / "benchmarks" / "bench_explorer.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_explorer"] = bench
_spec.loader.exec_module(bench)

METHODS = ["rredcot", "mc", "loo", "shapley", "gradient-ig"]
PAYLOAD = "</script><script>window.pwned = 1</script><!-- & &amp; <b>bold</b> </SCRIPT >\n"


def with_text(scores: pd.DataFrame, traces: list[dict], tid: str, segment: int, text: str):
    """Replace one segment's text in the tables and the trace's response (offsets shifted)."""
    scores, traces = scores.copy(), [dict(t) for t in traces]
    rows = scores["trace_id"] == tid
    old = scores.loc[rows & (scores["segment"] == segment)].iloc[0]
    shift = len(text) - (old["char_end"] - old["char_start"])
    scores.loc[rows & (scores["segment"] == segment), ["text", "char_end"]] = [
        text, old["char_start"] + len(text)]
    later = rows & (scores["segment"] > segment)
    scores.loc[later, ["char_start", "char_end"]] += shift
    err = scores.loc[rows, "error_char"]
    moved = rows & err.notna() & (err > old["char_start"])
    scores.loc[moved, "error_char"] += shift
    rec = next(t for t in traces if t["id"] == tid)
    r = rec["response"]
    rec["response"] = r[:old["char_start"]] + text + r[old["char_end"]:]
    return scores, traces


@pytest.fixture(scope="module")
def tables():
    scores, traces = bench.synthetic_scores(60, 8, METHODS, chars=30, seed=1, min_segments=2)
    return with_text(scores, traces, "trace-00003", 1, PAYLOAD)


def expected_credit(scores: pd.DataFrame) -> pd.Series:
    """Credits computed directly: value differences for rredcot and mc, score for the rest."""
    out = scores["score"].astype("float64").copy()
    g = scores["method"] == "rredcot"
    out[g] = scores.loc[g, "g_after"] - scores.loc[g, "g_before"]
    v = scores["method"] == "mc"
    out[v] = scores.loc[v, "value_after"] - scores.loc[v, "value_before"]
    return out


def at3(x: float) -> float | None:
    return float(f"{x:.3g}") if math.isfinite(x) else None


def segments_of(data: dict, t: int) -> range:
    first = int(np.sum(data["trace"]["n_segments"][:t]))
    return range(first, first + data["trace"]["n_segments"][t])


def fast_report(out_dir, **_):
    """Stands in for ``write_report`` (its figures take seconds; ``test_compare`` tests it):
    these tests are about what the explorer's flags do."""
    from cotcredit.report.sections import ReportFiles

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return ReportFiles(out, out / "correlations.parquet", out / "report.md", out / "report.html",
                       out / "report.tex", None, None, [])


# ----------------------------------------------------------------------------- data


def test_embedded_data_equals_the_tables(tables, tmp_path):
    scores, traces = tables
    written = write_explorer(scores, traces, tmp_path / EXPLORER_FILE)
    data = read_explorer_data(written.path)
    assert written.kept == written.n_traces == 60 and data["cap"]["limit"] is None
    assert data["methods"] == METHODS and data["reference"] == "mc"
    T, S = data["trace"], data["segment"]
    ids = list(dict.fromkeys(scores["trace_id"]))
    assert T["id"] == ids
    credit = scores.assign(credit=expected_credit(scores))
    record = {r["id"]: r for r in traces}
    n_prompts = len({record[i]["prompt"] for i in ids})
    assert len(data["prompts"]) == n_prompts  # each prompt once
    for t, tid in enumerate(ids):
        rows = credit.loc[credit["trace_id"] == tid].sort_values(["method", "segment"])
        mc = rows.loc[rows["method"] == "mc"].sort_values("segment")
        assert T["n_segments"][t] == len(mc)
        assert T["text"][t] == record[tid]["response"] and T["rebuilt"][t] == 0
        assert data["prompts"][T["prompt"][t]] == record[tid]["prompt"]
        assert T["outcome"][t] == record[tid]["outcome"]
        err = mc["error_char"].iloc[0]
        assert T["error_char"][t] == (None if pd.isna(err) else int(err))
        if not pd.isna(err) and err >= 0:
            holder = mc.loc[(mc["char_start"] <= err) & (err < mc["char_end"]), "segment"]
            assert T["error_segment"][t] == int(holder.iloc[0])
            assert T["text"][t][T["error_at"][t]] == T["text"][t][int(err)]
        for j, r in zip(segments_of(data, t), mc.itertuples(), strict=True):
            assert T["text"][t][S["start"][j]:S["start"][j] + S["len"][j]] == r.text
        for m in METHODS:
            want = rows.loc[rows["method"] == m].sort_values("segment")["credit"]
            assert [S["score"][m][j] for j in segments_of(data, t)] == [at3(x) for x in want]
        curve = data["curve"]["mc"]
        assert curve["v0"][t] == at3(mc["value_before"].iloc[0])
        assert [curve["v"][j] for j in segments_of(data, t)] == [at3(x) for x in mc["value_after"]]
        assert [curve["stderr"][j] for j in segments_of(data, t)] == [at3(x) for x in mc["stderr"]]
    assert set(data["curve"]) == {"rredcot", "mc"} and "stderr" not in data["curve"]["rredcot"]


def test_trace_statistics_match_a_direct_computation(tables):
    scores, traces = tables
    data = read_explorer_data(render_explorer(explorer_data(scores, traces)))
    T = data["trace"]
    credit = scores.assign(credit=expected_credit(scores))
    for t, tid in enumerate(T["id"]):
        rows = credit.loc[credit["trace_id"] == tid]
        x = {m: rows.loc[rows["method"] == m].sort_values("segment")["credit"].to_numpy()
             for m in METHODS}
        k = len(x["mc"])
        rho = {(a, b): stats.spearmanr(x[a], x[b]).statistic
               for i, a in enumerate(METHODS) for b in METHODS[i + 1:]}
        for m in METHODS[:1] + METHODS[2:]:
            want = rho[(m, "mc")] if (m, "mc") in rho else rho[("mc", m)]
            got = T["rho"][m][t]
            assert (got is None) if k < 3 else got == pytest.approx(want, abs=6e-3)
        assert (T["min_rho"][t] is None) if k < 3 else T["min_rho"][t] == pytest.approx(
            min(rho.values()), abs=6e-3)
        e = T["error_segment"][t]
        for m in METHODS:
            if e is None or e < 0:
                assert T["hit"][m][t] is None
            else:
                low = np.flatnonzero(x[m] == x[m].min())
                assert T["hit"][m][t] == pytest.approx((e in low) / len(low), abs=1e-3)
    assert "mc" not in T["rho"]  # the reference is not compared with itself


def test_texts_are_escaped(tables, tmp_path):
    scores, traces = tables
    page = write_explorer(scores, traces, tmp_path / "e.html", title="<b>x</b> & y").path
    html = page.read_text("utf-8")
    assert html.lower().count("</script") == 2  # the data island's and the code's own
    assert "<!--" not in html and "<b>bold" not in html
    assert "<title>&lt;b&gt;x&lt;/b&gt; &amp; y</title>" in html
    data = read_explorer_data(page)
    t = data["trace"]["id"].index("trace-00003")
    assert PAYLOAD in data["trace"]["text"][t]
    assert data["title"] == "<b>x</b> & y"
    # A lone surrogate in a record (tables cannot hold one) survives as a JSON escape.
    recs = [dict(r, prompt="bad \ud800 prompt") if r["id"] == "trace-00005" else r
            for r in traces]
    data = read_explorer_data(write_explorer(scores, recs, tmp_path / "s.html").path)
    assert "bad \ud800 prompt" in data["prompts"]


def test_without_traces_the_text_is_rebuilt_from_the_segments(tables):
    scores, traces = tables
    mismatched = [dict(r, response="something else") if r["id"] == "trace-00001" else r
                  for r in traces]
    for given, rebuilt in ((None, set(scores["trace_id"])), (mismatched, {"trace-00001"})):
        data = explorer_data(scores, given)
        T = data["trace"]
        assert {i for i, r in zip(T["id"], T["rebuilt"], strict=True) if r} == rebuilt
        for t, tid in enumerate(T["id"]):
            if tid not in rebuilt:
                continue
            seg = scores.loc[(scores["trace_id"] == tid) & (scores["method"] == "mc")]
            assert T["text"][t] == "".join(seg.sort_values("segment")["text"])
            starts = [int(data["segment"]["start"][j]) for j in segments_of(data, t)]
            assert starts == list(np.cumsum([0, *seg["text"].str.len()])[:-1])
        assert given is not None or (data["prompts"] == [] and set(T["prompt"]) == {-1})


def test_baselines_are_left_out_and_credit_is_selectable(tables):
    scores, traces = tables
    base = scores.loc[scores["method"] == "loo"].assign(method="position", score=0.5)
    data = explorer_data(pd.concat([scores, base]), traces, credit="score", reference="loo")
    assert data["methods"] == METHODS and data["reference"] == "loo"
    first = scores.loc[scores["trace_id"] == "trace-00000"]
    for m in ("rredcot", "mc"):  # as written, not differences
        want = first.loc[first["method"] == m].sort_values("segment")["score"]
        got = data["segment"]["score"][m][:len(want)]
        assert [at3(x) for x in got] == [at3(x) for x in want]
    assert explorer_data(scores, traces, methods=["loo", "mc"])["methods"] == ["loo", "mc"]
    # The legend names what each method's shading is: --credit changes value methods only.
    assert set(data["credit_of"].values()) == {"score as written"}
    of = explorer_data(scores, traces, credit="return")["credit_of"]
    assert of == {m: "return" if m in ("rredcot", "mc") else "score as written" for m in METHODS}


def expected_keep_order(data: dict) -> list[str]:
    """Erroneous traces first, then ascending min ρ (undefined last), ties in table order."""
    T = data["trace"]

    def key(t):
        e, r = T["error_segment"][t], T["min_rho"][t]
        return (not (e is not None and e >= 0), math.inf if r is None else r, t)

    return [T["id"][t] for t in sorted(range(len(T["id"])), key=key)]


def test_cap_keeps_erroneous_traces_then_the_strongest_disagreement(tables, tmp_path):
    scores, traces = tables
    full = explorer_data(scores, traces, max_bytes=None, digits=17)
    order = expected_keep_order(full)
    written = write_explorer(scores, traces, tmp_path / "c.html", max_traces=30)
    data = read_explorer_data(written.path)
    assert data["cap"] | {"rule": None} == {"total": 60, "kept": 30, "limit": "max_traces=30",
                                           "rule": None}
    assert set(data["trace"]["id"]) == set(order[:30])
    assert data["trace"]["id"] == [i for i in full["trace"]["id"] if i in set(order[:30])]
    assert "30 of 60 traces kept" in written.note and "labelled error first" in written.note
    n_err = sum(e is not None and e >= 0 for e in full["trace"]["error_segment"])
    assert 0 < n_err < 30  # the cut runs through the disagreement order
    # A byte budget: the file stays under it, and keeps a prefix of the same order.
    budget = 85_000
    written = write_explorer(scores, traces, tmp_path / "b.html", max_bytes=budget)
    kept = read_explorer_data(written.path)["trace"]["id"]
    assert written.n_bytes <= budget and 0 < written.kept < 60
    assert set(kept) == set(order[:written.kept]) and written.limit == "max_bytes=85,000"
    assert write_explorer(scores, traces, tmp_path / "a.html").note is None


def test_size_grows_linearly_in_segments(tmp_path):
    sizes = {}
    for n in (50, 100, 200):
        s, t = bench.synthetic_scores(n, 10, METHODS, chars=40, seed=2)
        sizes[n] = write_explorer(s, t, tmp_path / f"{n}.html", max_bytes=None).n_bytes
    per_a = (sizes[100] - sizes[50]) / (50 * 10)
    per_b = (sizes[200] - sizes[100]) / (100 * 10)
    assert per_b == pytest.approx(per_a, rel=0.05)
    by_k = {}
    for k in (5, 10, 20):  # more segments per trace: the same bytes per added segment
        s, t = bench.synthetic_scores(100, k, METHODS, chars=40, seed=2)
        by_k[k] = write_explorer(s, t, tmp_path / f"k{k}.html", max_bytes=None).n_bytes
    assert (by_k[20] - by_k[10]) / 10 == pytest.approx((by_k[10] - by_k[5]) / 5, rel=0.05)


# ----------------------------------------------------------------------------- the browser


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium through Playwright; skipped where either is missing (unless
    COTCREDIT_REQUIRE_BROWSER=1, as in CI: then missing is a failure)."""
    required = os.environ.get("COTCREDIT_REQUIRE_BROWSER") == "1"
    missing = None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing = "playwright is not installed (pip install -e '.[dev]')"
    if missing is None and bench.chromium_path() is None:
        missing = not_installed(f"chromium ({bench.DEBIAN_CHROMIUM})", "chromium")
    if missing:
        if required:
            pytest.fail(missing)
        pytest.skip(missing)
    with sync_playwright() as p:
        b = bench.launch_chromium(p)
        yield b
        b.close()


def open_page(browser, path: Path):
    """A page on ``path`` that records console errors and page errors."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.errors = []
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.on("dialog", lambda d: (page.errors.append("dialog " + d.message), d.dismiss()))
    page.goto(path.resolve().as_uri())
    page.wait_for_selector("body[data-ready=true]")
    return page


def visible_ids(page) -> list[str]:
    rows = page.locator("#grid-body .row")
    return sorted((int(i), t) for i, t in rows.evaluate_all(
        "rs => rs.map(r => [r.getAttribute('aria-rowindex'), r.dataset.traceId])"))


def shows_trace(page, heading: str) -> None:
    """Wait until the trace view's heading reads `heading` (the view renders after the event
    that opened it returns); fails with the heading it shows if that does not happen."""
    try:
        page.wait_for_function("h => document.getElementById('trace-heading').textContent === h",
                               arg=heading, timeout=10_000)
    except Exception:
        shown = page.text_content("#trace-heading")
        pytest.fail(f"the trace view shows {shown!r}, not {heading!r}")


def check_segments(page, data: dict, t: int) -> None:
    """The open trace's segments carry the page data's index and credits, and its texts."""
    segs = page.locator("#reasoning .seg")
    got = segs.evaluate_all("""ss => ss.map(s => {
        const out = {segment: s.dataset.segment, text: ''};
        for (const a of s.attributes) if (a.name.startsWith('data-score-')) out[a.name] = a.value;
        for (const n of s.childNodes) if (n.nodeType === 3) out.text += n.textContent;
        return out; })""")
    rows = list(segments_of(data, t))
    assert len(got) == len(rows)
    text = data["trace"]["text"][t]
    for g, j in zip(got, rows, strict=True):
        assert int(g["segment"]) == j - rows[0]
        assert g["text"] == text[data["segment"]["start"][j]:][:data["segment"]["len"][j]]
        for m in data["methods"]:
            want, attr = data["segment"]["score"][m][j], g[f"data-score-{m}"]
            assert attr == "" if want is None else float(attr) == want
    check_shading(page, data, t)


def check_shading(page, data: dict, t: int) -> None:
    """Each segment's colour follows the shading method's credit: red below 0, blue above,
    white at 0, the largest |credit| of the trace at full strength."""
    method = page.get_attribute(".method[aria-checked=true]", "data-method")
    colours = page.locator("#reasoning .seg").evaluate_all(
        "ss => ss.map(s => getComputedStyle(s).backgroundColor)")
    scores = [data["segment"]["score"][method][j] for j in segments_of(data, t)]
    scale = max((abs(v) for v in scores if v is not None), default=0)
    for v, c in zip(scores, colours, strict=True):
        if v is None or scale == 0:
            assert c == "rgba(0, 0, 0, 0)"  # unshaded
            continue
        r, _, b = (int(x) for x in c[c.index("(") + 1:c.index(")")].split(","))
        assert (r > b) if v < 0 else (b > r) if v > 0 else (r == b == 247)
        if abs(v) == scale:
            assert (r, b) == ((214, 77) if v < 0 else (67, 195))


def test_browser_sorts_filters_opens_and_navigates(browser, tables, tmp_path):
    scores, traces = tables
    path = write_explorer(scores, traces, tmp_path / EXPLORER_FILE).path
    data = read_explorer_data(path)
    T = data["trace"]
    page = open_page(browser, path)
    assert page.text_content("#count") == "60 of 60 traces"
    assert page.get_attribute("#grid", "aria-rowcount") == "61"
    assert [i for _, i in visible_ids(page)][:5] == T["id"][:5]

    # Sort by min ρ, ascending then descending; undefined last both ways, ties in table order.
    page.click(".sort[data-key=min_rho]")
    defined = sorted((r, t) for t, r in enumerate(T["min_rho"]) if r is not None)
    undefined = [t for t, r in enumerate(T["min_rho"]) if r is None]
    assert [i for _, i in visible_ids(page)][:10] == [T["id"][t] for _, t in defined][:10]
    assert page.get_attribute("[role=columnheader]:has(.sort[data-key=min_rho])",
                              "aria-sort") == "ascending"
    page.click(".sort[data-key=min_rho]")
    down = sorted(defined, key=lambda x: (-x[0], x[1]))
    assert [i for _, i in visible_ids(page)][:10] == [T["id"][t] for _, t in down][:10]
    page.evaluate("document.getElementById('grid').scrollTop = 1e6")
    page.wait_for_function("document.querySelector('#grid-body .row:last-child')"
                           ".getAttribute('aria-rowindex') === '61'")
    assert visible_ids(page)[-1][1] == T["id"][undefined[-1]]

    # Filters: each count equals the data's.
    page.select_option("#f-outcome", "wrong")
    wrong = sum(o == 0 for o in T["outcome"])
    assert page.text_content("#count") == f"{wrong} of 60 traces"
    assert all(c == "✗ wrong" for c in page.locator("#grid-body .row .cell:nth-child(2)")
               .all_text_contents())
    page.select_option("#f-outcome", "")
    page.select_option("#f-hit-method", "loo")
    page.select_option("#f-hit", "hit")
    hits = sum(h == 1 for h in T["hit"]["loo"])
    assert page.text_content("#count") == f"{hits} of 60 traces"
    page.click("#f-reset")
    page.wait_for_function("document.getElementById('count').textContent === '60 of 60 traces'")
    page.evaluate("const r = document.getElementById('f-rho'); r.value = '0';"
                  "r.dispatchEvent(new Event('input'))")
    low = sum(r is not None and r <= 0 for r in T["min_rho"])
    assert page.text_content("#count") == f"{low} of 60 traces"
    page.click("#f-reset")
    page.fill("#f-search", "window.pwned")  # the payload's text, found as text
    page.wait_for_function("document.getElementById('count').textContent === '1 of 60 traces'")
    assert visible_ids(page) == [(2, "trace-00003")]

    # Open it: the payload is shown as text and ran nowhere.
    page.click("#grid-body .row[data-trace-id='trace-00003']")
    t = T["id"].index("trace-00003")
    shows_trace(page, "Trace trace-00003")
    check_segments(page, data, t)
    assert PAYLOAD.strip() in page.text_content("#reasoning")
    assert page.evaluate("window.pwned") is None
    assert page.locator("#reasoning b, #reasoning script").count() == 0

    # Keyboard: j/k and arrows walk the list; digits switch the method; Tab and arrows walk
    # the segments and show their scores.
    page.click("#f-reset")
    page.wait_for_function("document.getElementById('count').textContent === '60 of 60 traces'")
    page.click(".sort[data-key=id]")  # ids sort naturally: table order here
    page.click("#grid-body .row[data-trace-id='trace-00000']")
    page.keyboard.press("j")
    page.keyboard.press("j")
    shows_trace(page, "Trace trace-00002")
    check_segments(page, data, 2)
    page.keyboard.press("k")
    shows_trace(page, "Trace trace-00001")
    page.keyboard.press("ArrowDown")
    assert page.get_attribute("#grid-body .row[aria-selected=true]", "data-trace-id") == (
        "trace-00002")
    assert page.get_attribute("#grid", "aria-activedescendant") == "row-2"
    page.keyboard.press("3")
    assert page.get_attribute(".method[aria-checked=true]", "data-method") == "loo"
    check_shading(page, data, 2)  # now by loo's credit
    page.focus("#reasoning .seg[data-rank='0']")
    tip = page.text_content("#seg-tip")
    assert page.is_visible("#seg-tip") and "segment 0" in tip
    first = segments_of(data, 2)[0]
    shown = page.get_attribute("#reasoning .seg[data-rank='0']", "data-score-loo")
    assert f"loo: {shown}" in tip
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.rank") == "1"
    # The lowest credit of the shading method is marked; so is the labelled first error.
    low = min(range(T["n_segments"][2]),
              key=lambda j: (data["segment"]["score"]["loo"][first + j] is None,
                             data["segment"]["score"]["loo"][first + j] or 0))
    assert page.get_attribute("#reasoning .seg.lowest", "data-rank") == str(low)
    e = next(t for t, s in enumerate(T["error_segment"]) if s is not None and s >= 0)
    page.evaluate(f"location.hash = ''; history.replaceState(null, '', '#trace={T['id'][e]}')")
    page.reload()
    page.wait_for_selector("body[data-ready=true]")
    shows_trace(page, f"Trace {T['id'][e]}")
    assert page.get_attribute("#reasoning .seg.error", "data-rank") == str(T["error_segment"][e])
    assert page.locator("#reasoning .error-mark").count() == 1
    assert page.locator("#curves svg").count() == 2  # rredcot g_k and mc V_k with its band
    assert page.locator("#curves polygon.interval").count() == 1
    page.screenshot(path=str(tmp_path / "explorer.png"))
    assert (tmp_path / "explorer.png").stat().st_size > 10_000
    assert page.errors == []


def test_browser_click_survives_a_redraw_between_press_and_release(browser, tables, tmp_path):
    """A redraw of the list (here a scroll) between mousedown and mouseup keeps the row
    elements, so the click still has one target and opens its trace (it used to replace them:
    the click landed on the list and the previous trace stayed open)."""
    scores, traces = tables
    page = open_page(browser, write_explorer(scores, traces, tmp_path / EXPLORER_FILE).path)
    row = page.locator("#grid-body .row[data-trace-id='trace-00004']")
    box = row.bounding_box()
    page.mouse.move(box["x"] + 20, box["y"] + box["height"] / 2)
    page.mouse.down()
    kept = page.evaluate("""async () => {
        const r = document.getElementById('row-4');
        document.getElementById('grid').dispatchEvent(new Event('scroll'));
        await new Promise(res => requestAnimationFrame(() => requestAnimationFrame(res)));
        return r.isConnected && r === document.getElementById('row-4');
    }""")
    page.mouse.up()
    assert kept
    shows_trace(page, "Trace trace-00004")
    assert page.get_attribute("#grid-body .row[aria-selected=true]", "data-trace-id") == (
        "trace-00004")
    assert page.errors == []


def test_browser_shows_the_cap(browser, tables, tmp_path):
    scores, traces = tables
    path = write_explorer(scores, traces, tmp_path / "cap.html", max_traces=7).path
    page = open_page(browser, path)
    note = page.text_content("#cap-note")
    assert page.is_visible("#cap-note") and "Showing 7 of 60 traces" in note
    assert page.text_content("#count") == "7 of 7 traces" and page.errors == []


def test_browser_draws_thin_pages_without_errors(browser, tables, tmp_path):
    """One method and no records (texts rebuilt, no ρ, no curve); a trace one method did not
    score; no trace at all."""
    scores, traces = tables
    loo = scores.loc[scores["method"] == "loo"]
    page = open_page(browser, write_explorer(loo, None, tmp_path / "one.html").path)
    assert page.locator("#reasoning .seg").count() > 0 and page.locator("#curves svg").count() == 0
    assert "rebuilt" in page.text_content("#trace-meta")
    partial = scores.loc[~((scores["method"] == "mc") & (scores["trace_id"] == "trace-00000"))]
    page2 = open_page(browser, write_explorer(partial, traces, tmp_path / "part.html").path)
    assert set(page2.locator("#reasoning .seg").evaluate_all(
        "ss => ss.map(s => s.getAttribute('data-score-mc'))")) == {""}
    page3 = open_page(browser, write_explorer(scores.iloc[:0], None, tmp_path / "none.html").path)
    assert page3.text_content("#count") == "0 of 0 traces"
    page3.keyboard.press("j")
    assert page.errors == page2.errors == page3.errors == []


def test_browser_on_a_compare_run(browser, tiny_model_dir, traces_file, tmp_path, monkeypatch):
    """A real compare on the tiny model (the methods run, the report's figures left out)
    writes explorer.html beside the report, prompts and full texts included: every trace's
    shaded segments carry its credits."""
    import cotcredit
    from cotcredit.pipeline.scores import load_scores
    from cotcredit.report import writer
    from cotcredit.report.compare import ReportOptions

    monkeypatch.setattr(writer, "write_report", lambda scores, corr, out_dir, **kw:
                        fast_report(out_dir))
    out = tmp_path / "report"
    result = cotcredit.compare(traces_file, methods="rredcot,mc,loo", output=out,
                               model=str(tiny_model_dir),
                               shortcuts={"rollouts": 2, "max_new_tokens": 4},
                               report=ReportOptions(bootstrap=50))
    path = out / EXPLORER_FILE
    assert result.explorer.path == path and result.explorer.note is None
    scores = load_scores([out / f"{m}.parquet" for m in ("rredcot", "mc", "loo")])
    data = read_explorer_data(path)
    credit = scores.assign(credit=expected_credit(scores))
    page = open_page(browser, path)
    for t, tid in enumerate(data["trace"]["id"]):
        page.click(f"#grid-body .row[data-trace-id='{tid}']")
        check_segments(page, data, t)
        rows = credit.loc[credit["trace_id"] == tid]
        for m in ("rredcot", "mc", "loo"):
            want = rows.loc[rows["method"] == m].sort_values("segment")["credit"]
            got = page.locator("#reasoning .seg").evaluate_all(
                f"ss => ss.map(s => s.getAttribute('data-score-{m}'))")
            assert [float(g) if g else None for g in got] == [at3(x) for x in want]
        assert data["trace"]["rebuilt"][t] == 0 and data["prompts"][data["trace"]["prompt"][t]]
        assert page.text_content("#prompt") == data["prompts"][data["trace"]["prompt"][t]]
    assert page.errors == []


# ----------------------------------------------------------------------------- compare


@pytest.fixture
def score_folder(tmp_path, tables):
    """The synthetic tables (12 traces) as the per-method commands leave them, and their
    traces file."""
    import json

    scores, traces = tables
    keep = {f"trace-{i:05d}" for i in range(12)}
    scores = scores.loc[scores["trace_id"].isin(keep)]
    traces = [r for r in traces if r["id"] in keep]
    for m in ("rredcot", "mc", "loo"):
        scores.loc[scores["method"] == m].to_parquet(tmp_path / f"{m}.parquet", index=False)
    with open(tmp_path / "traces.jsonl", "w") as fh:
        fh.writelines(json.dumps({**r, "answer": "12"}) + "\n" for r in traces)
    return tmp_path


def test_compare_writes_the_explorer_and_says_when_it_is_capped(score_folder, capsys,
                                                                 monkeypatch):
    from conftest import run_cli

    from cotcredit.report import writer

    monkeypatch.setattr(writer, "write_report", lambda scores, corr, out_dir, **kw:
                        fast_report(out_dir))
    monkeypatch.chdir(score_folder)
    base = ["compare", "--methods", "rredcot,mc,loo", "--bootstrap", "20"]
    code, _, err = run_cli([*base, "--max-traces-explorer", "5", "--explorer-traces",
                            "traces.jsonl"], capsys)
    assert code == 0, err
    data = read_explorer_data(score_folder / "report" / EXPLORER_FILE)
    assert data["cap"]["kept"] == 5 and data["methods"] == ["rredcot", "mc", "loo"]
    assert set(data["trace"]["rebuilt"]) == {0} and data["prompts"]
    assert "explorer: report/explorer.html" in err
    assert "explorer: 5 of 12 traces kept (max_traces=5)" in " ".join(err.split())
    code, _, err = run_cli([*base, "-o", "none", "--no-explorer"], capsys)
    assert code == 0 and not (score_folder / "none" / EXPLORER_FILE).exists()
    assert "explorer:" not in err
    for bad, says in ((["--max-traces-explorer", "0"], "--max-traces-explorer must be at least 1"),
                      (["--explorer-traces", "gone.jsonl"], "--explorer-traces: gone.jsonl")):
        code, _, err = run_cli([*base, "-o", "bad", *bad], capsys)
        assert code == 2 and err.startswith("error: ") and says in err
        assert len(err.strip().splitlines()) == 1
