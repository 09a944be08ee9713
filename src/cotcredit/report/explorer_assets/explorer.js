// cotcredit trace explorer: reads the JSON island, draws the trace list (only the rows in view)
// and one trace at a time. Every text goes in through textContent, never as markup.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("explorer-data").textContent);
  const T = D.trace, S = D.segment, METHODS = D.methods, REF = D.reference;
  const N = T.id.length;
  const ROW_H = 28;      // px; the list is virtualised on this fixed row height
  const OVERSCAN = 8;    // rows drawn above and below the visible ones
  const $ = (id) => document.getElementById(id);
  const SVGNS = "http://www.w3.org/2000/svg";

  // Segment k of trace t is row first[t] + k of the segment arrays.
  const first = new Int32Array(N + 1);
  for (let t = 0; t < N; t++) first[t + 1] = first[t] + T.n_segments[t];

  const state = {
    order: null,        // trace indices after filter and sort
    sel: -1,            // selected trace (index into T)
    method: METHODS.indexOf(REF) >= 0 ? REF : METHODS[0],
    sortKey: null, sortDir: 1,
    focusSeg: -1,       // rank of the focused segment in the selected trace
  };

  // ------------------------------------------------------------------ formatting
  const digits = D.digits || 3;
  function num(v) {
    if (v === null || v === undefined) return "–";
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e4 || a < 1e-3) return v.toExponential(digits - 1).replace("e+", "e");
    return String(Number(v.toPrecision(digits)));
  }
  function rhoText(v) { return v === null ? "–" : v.toFixed(2); }
  function outcomeText(v) {
    if (v === null) return "?";
    if (v === 1) return "✓ correct";
    if (v === 0) return "✗ wrong";
    return num(v);
  }
  function hitText(v) {
    if (v === null) return "";
    if (v === 1) return "✓";
    if (v === 0) return "✗";
    return "½";
  }
  function hitWords(v) {
    if (v === null) return "no label";
    if (v === 1) return "hit";
    if (v === 0) return "miss";
    return "tied (" + num(v) + ")";
  }
  function errorText(t) {
    const seg = T.error_segment[t], at = T[D.error_field][t];
    if (seg === null) return at === null ? "?" : "after";
    if (seg < 0) return "none";
    return "seg " + seg;
  }
  function attrName(m) { return "data-score-" + m.toLowerCase().replace(/[^a-z0-9-]/g, "-"); }
  function el(tag, attrs, text) {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVGNS, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    return e;
  }

  // Diverging scale centred on 0: blue positive, red negative, white 0; endpoints light enough
  // for black text (contrast above 4.5:1).
  const POS = [67, 147, 195], NEG = [214, 96, 77], MID = [247, 247, 247];
  function shade(v, scale) {
    if (v === null || !(scale > 0)) return "transparent";
    const x = Math.max(-1, Math.min(1, v / scale)), end = x >= 0 ? POS : NEG, a = Math.abs(x);
    const c = MID.map((m, i) => Math.round(m + (end[i] - m) * a));
    return "rgb(" + c.join(",") + ")";
  }
  function traceScale(t, m) {
    let s = 0;
    const sc = S.score[m];
    for (let r = first[t]; r < first[t + 1]; r++) if (sc[r] !== null) s = Math.max(s, Math.abs(sc[r]));
    return s;
  }
  function lowest(t, m) {  // rank of the lowest credit (first of ties), or -1
    let best = -1, bv = Infinity;
    const sc = S.score[m];
    for (let r = first[t]; r < first[t + 1]; r++) {
      if (sc[r] !== null && sc[r] < bv) { bv = sc[r]; best = r - first[t]; }
    }
    return best;
  }
  function segIndex(r) { return S.index ? S.index[r] : r - first[segTrace(r)]; }
  function segTrace(r) {  // binary search: the trace owning segment row r
    let lo = 0, hi = N - 1;
    while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (first[mid] <= r) lo = mid; else hi = mid - 1; }
    return lo;
  }

  // ------------------------------------------------------------------ the list's columns
  const COLUMNS = [
    { key: "id", label: "trace", width: "minmax(7em, 1.5fr)", value: (t) => T.id[t], text: (t) => T.id[t], str: true },
    { key: "outcome", label: "outcome", width: "5.8em", value: (t) => T.outcome[t], text: (t) => outcomeText(T.outcome[t]) },
    { key: "n", label: "segs", width: "3.4em", value: (t) => T.n_segments[t], text: (t) => String(T.n_segments[t]), title: "segments" },
    { key: "error", label: "error", width: "4.2em", value: (t) => T.error_segment[t], text: errorText,
      title: "segment holding the first labelled error (" + D.error_field + ")" },
  ];
  // One column of localization hits, a mark per method in the switcher's order (sorted by
  // their sum); the filter above picks one method.
  COLUMNS.push({ key: "hits", label: "hits", cls: "marks", short: "hits\n" + METHODS.map((m, i) => i + 1).join(" "),
    width: (METHODS.length * 1.15 + 1) + "em",
    value: (t) => {
      let n = null;
      for (const m of METHODS) if (T.hit[m][t] !== null) n = (n || 0) + T.hit[m][t];
      return n;
    },
    text: (t) => METHODS.map((m) => hitText(T.hit[m][t]) || "·").join(" "),
    cellLabel: (t) => METHODS.map((m) => m + " " + hitWords(T.hit[m][t])).join(", "),
    title: "lowest credit on the first-error segment, per method (" +
      METHODS.map((m, i) => (i + 1) + " " + m).join(", ") +
      "): ✓ hit, ✗ miss, ½ tied, · no label; sorts by their sum" });
  for (const m of METHODS) {
    if (!T.rho[m]) continue;
    COLUMNS.push({ key: "rho:" + m, label: "ρ " + m, short: "ρ\n" + m, width: "3.5em", value: (t) => T.rho[m][t],
      text: (t) => rhoText(T.rho[m][t]), title: "Spearman of " + m + " with " + REF + " in this trace" });
  }
  COLUMNS.push({ key: "min_rho", label: "min ρ", short: "min\nρ", width: "3.5em", value: (t) => T.min_rho[t],
    text: (t) => rhoText(T.min_rho[t]), title: "lowest Spearman between any two methods (low: they disagree)" });
  const TEMPLATE = COLUMNS.map((c) => c.width).join(" ");

  // ------------------------------------------------------------------ filter and sort
  let haystack = null;  // lower-cased id, prompt and text of each trace, built on first search
  function matchesText(t, q) {
    if (!haystack) {
      haystack = new Array(N);
      for (let i = 0; i < N; i++) {
        const p = T.prompt[i] >= 0 ? D.prompts[T.prompt[i]] : "";
        haystack[i] = (T.id[i] + "\n" + p + "\n" + T.text[i]).toLowerCase();
      }
    }
    return haystack[t].indexOf(q) >= 0;
  }
  function applyFilters() {
    const q = $("f-search").value.trim().toLowerCase();
    const oc = $("f-outcome").value, er = $("f-error").value;
    const hm = $("f-hit-method").value, hv = $("f-hit").value;
    const rmax = parseFloat($("f-rho").value);
    $("f-rho-value").textContent = rmax.toFixed(2);
    const out = [];
    for (let t = 0; t < N; t++) {
      const o = T.outcome[t];
      if (oc === "correct" && o !== 1) continue;
      if (oc === "wrong" && o !== 0) continue;
      if (oc === "unknown" && o !== null) continue;
      const es = T.error_segment[t];
      if (er === "labelled" && !(es !== null && es >= 0)) continue;
      if (er === "none" && es !== -1) continue;
      if (er === "unknown" && es !== null) continue;
      if (hv && hm) {
        const h = T.hit[hm][t];
        if (h === null) continue;
        if (hv === "hit" && h !== 1) continue;
        if (hv === "miss" && h !== 0) continue;
        if (hv === "tie" && (h === 0 || h === 1)) continue;
      }
      if (rmax < 1 && !(T.min_rho[t] !== null && T.min_rho[t] <= rmax + 1e-9)) continue;
      if (q && !matchesText(t, q)) continue;
      out.push(t);
    }
    state.order = Int32Array.from(out);
    sortOrder();
    $("count").textContent = out.length.toLocaleString("en") + " of " + N.toLocaleString("en") + " traces";
    renderList(true);
  }
  const collator = new Intl.Collator("en", { numeric: true });
  function sortOrder() {
    const c = COLUMNS.find((x) => x.key === state.sortKey);
    if (!c) { state.order.sort(); return; }
    const dir = state.sortDir, arr = Array.from(state.order);
    const val = new Map(arr.map((t) => [t, c.value(t)]));
    arr.sort((a, b) => {
      const x = val.get(a), y = val.get(b);
      if (x === null || x === undefined) return (y === null || y === undefined) ? a - b : 1;
      if (y === null || y === undefined) return -1;
      const d = c.str ? collator.compare(x, y) : x - y;
      return d !== 0 ? dir * d : a - b;
    });
    state.order = Int32Array.from(arr);
  }

  // ------------------------------------------------------------------ the list
  const grid = $("grid"), body = $("grid-body");
  function renderHead() {
    const row = $("grid-head-row");
    row.style.gridTemplateColumns = TEMPLATE;
    row.textContent = "";
    COLUMNS.forEach((c) => {
      const sorted = state.sortKey === c.key;
      const h = el("div", { role: "columnheader", class: "cell",
        "aria-sort": sorted ? (state.sortDir > 0 ? "ascending" : "descending") : "none" });
      const b = el("button", { type: "button", class: "sort", "data-key": c.key, title: (c.title || c.label) + " — sort" },
        (c.short || c.label) + (sorted ? (state.sortDir > 0 ? " ▲" : " ▼") : ""));
      b.setAttribute("aria-label", "sort by " + c.label);
      b.addEventListener("click", () => {
        if (state.sortKey === c.key) state.sortDir = -state.sortDir; else { state.sortKey = c.key; state.sortDir = 1; }
        sortOrder(); renderHead(); renderList(true);
      });
      h.appendChild(b);
      row.appendChild(h);
    });
  }
  // A row element lives as long as its trace stays in view: a redraw (a scroll, a filter, a
  // selection) moves and updates rows but never replaces one, so a click whose mousedown
  // landed before the redraw and mouseup after it still has one target and still selects.
  let rows = new Map();  // trace -> its row element
  function makeRow(t) {
    const r = el("div", { role: "row", class: "row", id: "row-" + t, "data-trace-id": T.id[t] });
    r.style.gridTemplateColumns = TEMPLATE;
    for (const c of COLUMNS) {
      const cell = el("div", { role: "gridcell", class: "cell" + (c.cls ? " " + c.cls : c.str ? "" : " num") }, c.text(t));
      if (c.cellLabel) cell.setAttribute("aria-label", c.cellLabel(t));
      if (c.key === "id") cell.title = T.id[t];
      r.appendChild(cell);
    }
    return r;
  }
  function renderList(reset) {
    const n = state.order.length;
    grid.setAttribute("aria-rowcount", String(n + 1));
    body.style.height = (n * ROW_H) + "px";
    if (reset) grid.scrollTop = Math.min(grid.scrollTop, Math.max(0, n * ROW_H - grid.clientHeight));
    const top = Math.max(0, grid.scrollTop - body.offsetTop);
    const from = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    const to = Math.min(n, Math.ceil((top + grid.clientHeight) / ROW_H) + OVERSCAN);
    const next = new Map();
    for (let i = from; i < to; i++) {
      const t = state.order[i], r = rows.get(t) || makeRow(t);
      const y = (i * ROW_H) + "px", ri = String(i + 2), sel = t === state.sel ? "true" : "false";
      if (r.style.top !== y) r.style.top = y;
      if (r.getAttribute("aria-rowindex") !== ri) r.setAttribute("aria-rowindex", ri);
      if (r.getAttribute("aria-selected") !== sel) r.setAttribute("aria-selected", sel);
      next.set(t, r);
    }
    for (const [t, r] of rows) if (!next.has(t)) r.remove();
    let at = body.firstChild;  // document order = list order, moving only rows out of place
    for (const r of next.values()) {
      if (r === at) at = at.nextSibling; else body.insertBefore(r, at);
    }
    rows = next;
    const active = state.sel >= 0 && $("row-" + state.sel);
    if (active) grid.setAttribute("aria-activedescendant", active.id); else grid.removeAttribute("aria-activedescendant");
  }
  let scrollPending = false;
  grid.addEventListener("scroll", () => {
    if (scrollPending) return;
    scrollPending = true;
    requestAnimationFrame(() => { scrollPending = false; renderList(false); });
  });
  body.addEventListener("click", (e) => {
    const row = e.target.closest(".row");
    if (row) { select(Number(row.id.slice(4)), false); grid.focus({ preventScroll: true }); }
  });
  function scrollToSelected() {
    const i = state.order.indexOf(state.sel);
    if (i < 0) return;
    const y = body.offsetTop + i * ROW_H, h = grid.clientHeight, head = body.offsetTop;
    if (y < grid.scrollTop + head) grid.scrollTop = y - head;
    else if (y + ROW_H > grid.scrollTop + h) grid.scrollTop = y + ROW_H - h;
  }
  function step(delta) {
    const n = state.order.length;
    if (!n) return;
    let i = state.order.indexOf(state.sel);
    i = i < 0 ? (delta > 0 ? 0 : n - 1) : Math.max(0, Math.min(n - 1, i + delta));
    select(state.order[i], false);
  }

  // ------------------------------------------------------------------ one trace
  function select(t, fromHash) {
    state.sel = t;
    state.focusSeg = -1;
    scrollToSelected();
    renderList(false);
    renderTrace();
    if (!fromHash && t >= 0) history.replaceState(null, "", "#trace=" + encodeURIComponent(T.id[t]));
  }
  function renderMethodSwitch() {
    const box = $("method-switch");
    box.textContent = "";
    box.appendChild(el("span", { class: "switch-label", "aria-hidden": "true" }, "Shade by:"));
    METHODS.forEach((m, i) => {
      const on = m === state.method;
      const b = el("button", { type: "button", role: "radio", "aria-checked": on ? "true" : "false",
        tabindex: on ? "0" : "-1", class: "method", "data-method": m, "aria-keyshortcuts": String(i + 1) },
        (i < 9 ? (i + 1) + " " : "") + m + (m === REF ? " (reference)" : ""));
      b.addEventListener("click", () => setMethod(m));
      b.addEventListener("keydown", (e) => {
        if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
          e.preventDefault();
          const j = (i + (e.key === "ArrowRight" ? 1 : METHODS.length - 1)) % METHODS.length;
          setMethod(METHODS[j]);
          box.querySelector('[data-method="' + CSS.escape(METHODS[j]) + '"]').focus();
        }
      });
      box.appendChild(b);
    });
  }
  function setMethod(m) {
    if (METHODS.indexOf(m) < 0) return;
    state.method = m;
    renderMethodSwitch();
    renderTrace();
  }
  function renderLegend(t) {
    const box = $("legend"), m = state.method, s = t >= 0 ? traceScale(t, m) : 0;
    box.textContent = "";
    const bar = el("span", { class: "legend-bar", role: "img",
      "aria-label": "colour scale: red negative, white zero, blue positive" });
    box.appendChild(el("span", {}, "credit of " + m + " (" + (D.credit_of ? D.credit_of[m] : D.credit) + "):"));
    box.appendChild(el("span", { class: "legend-num" }, "−" + num(s)));
    box.appendChild(bar);
    box.appendChild(el("span", { class: "legend-num" }, "+" + num(s)));
    box.appendChild(el("span", { class: "legend-key" }, "scale: largest |credit| in this trace; underline solid ≥ 0, dotted < 0"));
    box.appendChild(el("span", { class: "legend-key" }, "▼ lowest credit"));
    box.appendChild(el("span", { class: "legend-key" }, "⚑ first error (labelled)"));
  }
  function renderStrips(t) {
    const box = $("strips");
    box.textContent = "";
    if (t < 0) return;
    const k = T.n_segments[t], es = T.error_segment[t];
    const head = el("div", { role: "row", class: "strip-row" });
    head.appendChild(el("span", { role: "columnheader", class: "strip-label" }, "segment"));
    for (let j = 0; j < k; j++) {
      head.appendChild(el("span", { role: "columnheader", class: "strip-cell head" + (j === es ? " error" : "") },
        j === es ? "⚑" : String(segIndex(first[t] + j))));
    }
    box.appendChild(head);
    for (const m of METHODS) {
      const row = el("div", { role: "row", class: "strip-row" + (m === state.method ? " current" : "") });
      row.appendChild(el("span", { role: "rowheader", class: "strip-label" }, m));
      const sc = S.score[m], scale = traceScale(t, m), low = lowest(t, m);
      for (let j = 0; j < k; j++) {
        const v = sc[first[t] + j];
        const c = el("span", { role: "cell", class: "strip-cell", "data-rank": String(j),
          title: m + ", segment " + segIndex(first[t] + j) + ": " + num(v) }, j === low ? "▼" : "");
        c.setAttribute("aria-label", num(v) + (j === low ? ", lowest" : ""));
        c.style.background = shade(v, scale);
        row.appendChild(c);
      }
      box.appendChild(row);
    }
    box.style.setProperty("--k", String(k));
  }
  function renderText(t) {
    const box = $("reasoning");
    box.textContent = "";
    if (t < 0) return;
    const text = T.text[t], m = state.method, scale = traceScale(t, m), low = lowest(t, m);
    const es = T.error_segment[t], at = T.error_at[t];
    let pos = 0;
    for (let j = 0; j < T.n_segments[t]; j++) {
      const r = first[t] + j, a = S.start[r], b = a + S.len[r];
      if (a > pos) box.appendChild(el("span", { class: "gap" }, text.slice(pos, a)));
      const v = S.score[m][r];
      const attrs = { class: "seg" + (v !== null && v < 0 ? " neg" : "") + (j === es ? " error" : "") + (j === low ? " lowest" : ""),
        tabindex: "0", "data-segment": String(segIndex(r)), "data-rank": String(j),
        role: "group", "aria-roledescription": "segment", "aria-describedby": "seg-tip" };
      for (const x of METHODS) {
        const s = S.score[x][r];
        attrs[attrName(x)] = s === null ? "" : String(s);
      }
      attrs["aria-label"] = "segment " + segIndex(r) + ", " + m + " " + num(v) +
        (j === low ? ", lowest credit" : "") + (j === es ? ", first error" : "");
      const span = el("span", attrs);
      span.style.background = shade(v, scale);
      if (j === low) span.appendChild(el("span", { class: "low-mark", "aria-hidden": "true" }, "▼"));
      if (j === es && at !== null && at >= a && at < b) {
        span.appendChild(document.createTextNode(text.slice(a, at)));
        span.appendChild(el("mark", { class: "error-mark", title: "first error (" + D.error_field + " = " + T[D.error_field][t] + ")", "aria-hidden": "true" }, "⚑"));
        span.appendChild(document.createTextNode(text.slice(at, b)));
      } else {
        span.appendChild(document.createTextNode(text.slice(a, b)));
      }
      box.appendChild(span);
      pos = Math.max(pos, b);
    }
    if (pos < text.length) box.appendChild(el("span", { class: "tail", title: "after the reasoning" }, text.slice(pos)));
  }
  function tipLines(t, j) {
    const r = first[t] + j, lines = ["segment " + segIndex(r) + (j === T.error_segment[t] ? "  ⚑ first error" : "")];
    for (const m of METHODS) {
      lines.push(m + ": " + num(S.score[m][r]) + (j === lowest(t, m) ? "  ▼ lowest" : ""));
    }
    for (const m in D.curve) {
      const c = D.curve[m], before = j === 0 ? c.v0[t] : c.v[r - 1];
      let line = m + " " + c.symbol + ": " + num(before) + " → " + num(c.v[r]);
      if (c.stderr && c.stderr[r] !== null) line += " (se " + num(c.stderr[r]) + ")";
      lines.push(line);
    }
    return lines;
  }
  const tip = $("seg-tip");
  function showTip(span) {
    const t = state.sel, j = Number(span.getAttribute("data-rank"));
    tip.textContent = "";
    for (const line of tipLines(t, j)) tip.appendChild(el("div", {}, line));
    tip.hidden = false;
    // Right of the text when it leaves room (no line hidden), else beside the segment, else
    // below or above it.
    const box = span.getBoundingClientRect(), w = tip.offsetWidth, h = tip.offsetHeight;
    let right = box.right, x, y;
    for (const part of reasoning.children) right = Math.max(right, part.getBoundingClientRect().right);
    if (right + 12 + w > window.innerWidth - 8) right = box.right;
    if (right + 12 + w <= window.innerWidth - 8) {
      x = right + 12;
      y = Math.max(8, Math.min(box.top, window.innerHeight - h - 8));
    } else {
      x = Math.min(window.innerWidth - w - 8, Math.max(8, box.left));
      y = box.bottom + 6;
      if (y + h > window.innerHeight) y = Math.max(8, box.top - h - 6);
    }
    tip.style.left = (x + window.scrollX) + "px";
    tip.style.top = (y + window.scrollY) + "px";
    focusSegment(j, false);
  }
  function hideTip() { tip.hidden = true; }
  function focusSegment(j, moveFocus) {
    state.focusSeg = j;
    document.querySelectorAll("#curves .focus-band").forEach((b) => {
      b.setAttribute("x", b.getAttribute("data-x" + j) || "0");
      b.style.display = j >= 0 ? "" : "none";
    });
    if (moveFocus) {
      const s = $("reasoning").querySelector('.seg[data-rank="' + j + '"]');
      if (s) s.focus();
    }
  }
  const reasoning = $("reasoning");
  reasoning.addEventListener("mouseover", (e) => { const s = e.target.closest(".seg"); if (s) showTip(s); });
  reasoning.addEventListener("mouseleave", () => { if (!reasoning.contains(document.activeElement)) hideTip(); });
  reasoning.addEventListener("focusin", (e) => { const s = e.target.closest(".seg"); if (s) showTip(s); });
  reasoning.addEventListener("focusout", (e) => { if (!reasoning.contains(e.relatedTarget)) hideTip(); });
  reasoning.addEventListener("keydown", (e) => {
    const s = e.target.closest(".seg");
    if (!s || (e.key !== "ArrowRight" && e.key !== "ArrowLeft")) return;
    e.preventDefault();
    const j = Number(s.getAttribute("data-rank")) + (e.key === "ArrowRight" ? 1 : -1);
    if (j >= 0 && j < T.n_segments[state.sel]) focusSegment(j, true);
  });
  $("strips").addEventListener("click", (e) => {
    const c = e.target.closest(".strip-cell[data-rank]");
    if (c) focusSegment(Number(c.getAttribute("data-rank")), true);
  });

  // Value curves (V_k with its interval, g_k) over the boundaries 0..K, as inline SVG.
  function renderCurves(t) {
    const box = $("curves");
    box.textContent = "";
    if (t < 0) return;
    const k = T.n_segments[t], W = 640, H = 170, L = 56, R = 12, TOP = 14, B = 30;
    for (const m in D.curve) {
      const c = D.curve[m];
      const v = [c.v0[t]], lo = [c.v0[t]], hi = [c.v0[t]];
      for (let j = 0; j < k; j++) {
        const x = c.v[first[t] + j], se = c.stderr ? c.stderr[first[t] + j] : null;
        v.push(x);
        lo.push(x === null || se === null ? x : x - 1.96 * se);
        hi.push(x === null || se === null ? x : x + 1.96 * se);
      }
      const prob = c.columns[0] === "value_before";
      if (prob) for (let j = 0; j <= k; j++) { if (lo[j] !== null) lo[j] = Math.max(0, lo[j]); if (hi[j] !== null) hi[j] = Math.min(1, hi[j]); }
      const finite = lo.concat(hi).filter((x) => x !== null);
      if (!finite.length) continue;
      let ymin = Math.min(...finite), ymax = Math.max(...finite);
      if (prob) { ymin = Math.min(0, ymin); ymax = Math.max(1, ymax); }
      if (ymax - ymin < 1e-12) { ymin -= 0.5; ymax += 0.5; }
      const px = (j) => L + (W - L - R) * (k ? j / k : 0.5);
      const py = (y) => TOP + (H - TOP - B) * (1 - (y - ymin) / (ymax - ymin));
      const fig = el("figure", { class: "curve" });
      const label = m + ": " + c.label + " over " + (k + 1) + " boundaries, from " + num(v[0]) + " to " + num(v[k]);
      const s = svg("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": label, class: "curve-svg" });
      const titleEl = svg("title", {}); titleEl.textContent = label; s.appendChild(titleEl);
      const es = T.error_segment[t];
      if (es !== null && es >= 0) {
        s.appendChild(svg("rect", { x: px(es), y: TOP, width: px(es + 1) - px(es), height: H - TOP - B, class: "error-band" }));
      }
      const band = svg("rect", { y: TOP, width: px(1) - px(0), height: H - TOP - B, class: "focus-band" });
      for (let j = 0; j < k; j++) band.setAttribute("data-x" + j, String(px(j)));
      band.style.display = "none";
      s.appendChild(band);
      const axis = svg("path", { d: "M" + L + " " + TOP + "V" + (H - B) + "H" + (W - R), class: "axis" });
      s.appendChild(axis);
      if (ymin < 0 && ymax > 0) s.appendChild(svg("path", { d: "M" + L + " " + py(0) + "H" + (W - R), class: "zero" }));
      for (const y of [ymin, ymax]) {
        const tx = svg("text", { x: L - 4, y: py(y) + 4, class: "tick", "text-anchor": "end" });
        tx.textContent = num(Number(y.toPrecision(3)));
        s.appendChild(tx);
      }
      const xl = svg("text", { x: (L + W - R) / 2, y: H - 6, class: "tick", "text-anchor": "middle" });
      xl.textContent = "boundary k (0 = prompt only, " + k + " = whole reasoning)";
      s.appendChild(xl);
      if (c.stderr) {
        const up = [], down = [];
        for (let j = 0; j <= k; j++) if (hi[j] !== null) { up.push(px(j) + "," + py(hi[j])); down.unshift(px(j) + "," + py(lo[j])); }
        if (up.length > 1) s.appendChild(svg("polygon", { points: up.concat(down).join(" "), class: "interval" }));
      }
      let d = "";
      for (let j = 0; j <= k; j++) if (v[j] !== null) d += (d ? "L" : "M") + px(j) + " " + py(v[j]);
      s.appendChild(svg("path", { d: d, class: "line" }));
      for (let j = 0; j <= k; j++) {
        if (v[j] === null) continue;
        const dot = svg("circle", { cx: px(j), cy: py(v[j]), r: 3.2, class: "dot" });
        const tt = svg("title", {});
        const se = j > 0 && c.stderr ? c.stderr[first[t] + j - 1] : null;
        tt.textContent = "k = " + j + ": " + num(v[j]) + (se !== null ? " ± " + num(1.96 * se) + " (1.96 stderr)" : "");
        dot.appendChild(tt);
        s.appendChild(dot);
      }
      fig.appendChild(s);
      fig.appendChild(el("figcaption", {}, m + ": " + c.label + " (" + c.columns.join(" / ") + ")" +
        (c.stderr ? ", band ±1.96 stderr" : "") + (es !== null && es >= 0 ? "; shaded column: first-error segment" : "")));
      box.appendChild(fig);
    }
  }
  function renderTrace() {
    const t = state.sel;
    renderLegend(t);
    renderStrips(t);
    renderText(t);
    renderCurves(t);
    hideTip();
    if (t < 0) { $("trace-heading").textContent = "No trace selected"; $("trace-meta").textContent = ""; return; }
    $("trace-heading").textContent = "Trace " + T.id[t];
    const bits = ["outcome " + outcomeText(T.outcome[t]), T.n_segments[t] + " segments"];
    const es = T.error_segment[t], ec = T[D.error_field][t];
    if (es !== null && es >= 0) bits.push("first error in segment " + es + " (char " + ec + ")");
    else if (es === -1) bits.push("no error (labelled)");
    else if (ec !== null) bits.push("first error at char " + ec + ", after the reasoning");
    for (const m of METHODS) if (T.hit[m][t] !== null) bits.push(m + " " + hitWords(T.hit[m][t]));
    if (T.min_rho[t] !== null) bits.push("min ρ " + num(T.min_rho[t]));
    $("trace-meta").textContent = bits.join(" · ");
    const p = T.prompt[t];
    $("prompt-box").hidden = false;
    $("prompt").textContent = p >= 0 ? D.prompts[p] : "(not in the score tables: pass the traces to see the prompt)";
    if (T.rebuilt[t]) $("trace-meta").textContent += " · text rebuilt from the segments (no final answer)";
  }

  // ------------------------------------------------------------------ keys and start
  function typing(e) {
    const n = e.target.nodeName;
    return n === "INPUT" || n === "SELECT" || n === "TEXTAREA" || e.target.isContentEditable;
  }
  document.addEventListener("keydown", (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    if (typing(e)) {
      if (e.key === "Escape") e.target.blur();
      return;
    }
    const onSeg = e.target.closest && e.target.closest("#reasoning .seg");
    if (e.key === "j" || (e.key === "ArrowDown" && !onSeg)) { e.preventDefault(); step(1); }
    else if (e.key === "k" || (e.key === "ArrowUp" && !onSeg)) { e.preventDefault(); step(-1); }
    else if (e.key === "Enter" && e.target === grid && state.sel < 0) { step(1); }
    else if (e.key === "/") { e.preventDefault(); $("f-search").focus(); }
    else if (e.key === "?") { e.preventDefault(); toggleHelp(); }
    else if (/^[1-9]$/.test(e.key) && Number(e.key) <= METHODS.length) { setMethod(METHODS[Number(e.key) - 1]); }
  });
  function toggleHelp() {
    const d = $("help");
    if (d.open) d.close(); else d.showModal();
  }
  $("help-button").addEventListener("click", toggleHelp);
  $("prev").addEventListener("click", () => step(-1));
  $("next").addEventListener("click", () => step(1));
  // Typing filters after a pause; Enter (change) at once, but only when a search is pending:
  // a change event on leaving the box must not redraw the row being clicked.
  let debounce = 0;
  $("f-search").addEventListener("input", () => {
    clearTimeout(debounce);
    debounce = setTimeout(() => { debounce = 0; applyFilters(); }, 120);
  });
  $("f-search").addEventListener("change", () => {
    if (debounce) { clearTimeout(debounce); debounce = 0; applyFilters(); }
  });
  for (const id of ["f-outcome", "f-error", "f-hit-method", "f-hit", "f-rho"]) $(id).addEventListener("input", applyFilters);
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("filters").addEventListener("reset", () => setTimeout(applyFilters, 0));
  const hm = $("f-hit-method");
  for (const m of METHODS) hm.appendChild(el("option", { value: m }, m));
  if (METHODS.indexOf(state.method) >= 0) hm.value = state.method;

  const cap = D.cap;
  $("summary").textContent = N.toLocaleString("en") + " traces · methods: " + METHODS.join(", ") +
    (REF ? " · reference: " + REF : "") + " · credit: " + D.credit + " · " + D.generator;
  if (cap.limit) {
    const note = $("cap-note");
    note.hidden = false;
    note.textContent = "Showing " + cap.kept.toLocaleString("en") + " of " + cap.total.toLocaleString("en") +
      " traces (" + cap.limit + "): " + cap.rule + ". The report's statistics use all traces.";
  }
  renderHead();
  renderMethodSwitch();
  applyFilters();
  const wanted = decodeURIComponent((location.hash.match(/^#trace=(.*)$/) || [])[1] || "");
  const start = wanted ? T.id.indexOf(wanted) : -1;
  select(start >= 0 ? start : (N ? state.order[0] : -1), true);
  document.body.setAttribute("data-ready-ms", performance.now().toFixed(0));
  document.body.setAttribute("data-ready", "true");
})();
