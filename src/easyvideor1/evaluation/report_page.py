"""The report page: HTML, CSS and plain JS (no library, no network). ``report_html.write_page`` puts
the title and the JSON rows in; the script renders one page of filtered samples at a time, so the
DOM holds at most ``size`` cards however many samples the run has. Element ids the tests read:
``shown-count`` (samples matching the filters), ``total-count``, ``verdict-counts``, ``page-info``;
the summary's interval cell has class ``ci`` (its title says what the interval rests on).
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:10px 18px}
header h1{font-size:18px;margin:0}
header .sub{color:#aab;font-size:12px}
main{padding:12px 18px}
table.sum{border-collapse:collapse;background:#fff;margin:6px 0 12px;font-size:13px}
table.sum td,table.sum th{border:1px solid #dde;padding:3px 8px;text-align:right}
table.sum td:first-child,table.sum th:first-child{text-align:left}
.filters{display:flex;flex-wrap:wrap;gap:8px;align-items:center;background:#fff;padding:8px;border:1px solid #dde;
 position:sticky;top:0;z-index:2}
.filters label{font-size:12px;color:#556}
.filters select,.filters input{font-size:13px;padding:3px}
#f-search{width:220px}
.counts{margin:8px 0;font-size:13px}
.counts .vc{display:inline-block;margin-right:10px}
.card{background:#fff;border:1px solid #dde;border-left:5px solid #999;margin:8px 0;padding:8px 10px}
.card.correct{border-left-color:#2a9d4b}.card.wrong{border-left-color:#d33}
.card.failure{border-left-color:#8a2be2}.card.extraction_failure{border-left-color:#e08a00}
.card.not_scored,.card.missing{border-left-color:#888}
.head{display:flex;gap:10px;flex-wrap:wrap;align-items:baseline;font-size:13px}
.badge{font-size:11px;padding:1px 6px;border-radius:8px;color:#fff;background:#888}
.badge.correct{background:#2a9d4b}.badge.wrong{background:#d33}.badge.failure{background:#8a2be2}
.badge.extraction_failure{background:#e08a00}
.id{color:#667;font-family:monospace;font-size:12px}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7fa;border:1px solid #eee;padding:5px;margin:3px 0;
 max-height:220px;overflow:auto;font-size:12px}
.kv{font-size:12px;color:#334}.kv b{color:#111}
.cols{display:grid;grid-template-columns:1fr 1fr;gap:10px}
img.th{display:block;margin:4px 0;border:1px solid #ccd}
.pager button{font-size:13px}
.delta.pos{color:#2a9d4b}.delta.neg{color:#d33}
</style></head>
<body>
<header><h1 id="title"></h1><div class="sub" id="subtitle"></div></header>
<main>
<div id="summary"></div>
<div class="filters">
 <label>benchmark <select id="f-bench"></select></label>
 <label>task <select id="f-task"></select></label>
 <label>breakdown <select id="f-field"></select></label>
 <select id="f-value"></select>
 <label>verdict <select id="f-verdict"></select></label>
 <label>search <input id="f-search" type="search" placeholder="id, prompt, response, answer"></label>
 <label>per page <select id="f-size"><option>10</option><option selected>25</option><option>100</option></select></label>
 <span class="pager"><button id="prev">&larr;</button> <span id="page-info"></span> <button id="next">&rarr;</button></span>
</div>
<div class="counts"><b id="shown-count">0</b> of <span id="total-count">0</span> samples shown &middot;
 <span id="verdict-counts"></span></div>
<div id="samples"></div>
</main>
<script type="application/json" id="report-data">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("report-data").textContent);
const ROWS = D.rows, CMP = D.mode === "compare";
const $ = (id) => document.getElementById(id);
const st = {page: 0};
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
function fmt(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(2); }
function ciNote(r) {  // the interval's basis, or why there is none (results.json's ci95_reason)
  if (r.ci95) return "score \u00b1 1.96 \u00d7 standard error " + fmt(r.stderr_clustered) + ", clustered over "
    + r.n_clusters + " videos (a question without a video counts alone)";
  return r.ci95_reason || "no interval in results.json";
}
function options(sel, values, all) {
  sel.replaceChildren();
  const o = el("option", null, all); o.value = ""; sel.appendChild(o);
  for (const [v, label] of values) { const e = el("option", null, label); e.value = v; sel.appendChild(e); }
}
function uniq(f) { return [...new Set(ROWS.map(f))].sort(); }
function summary() {
  $("title").textContent = D.title;
  $("subtitle").textContent = D.created + (D.thumbs_dropped ? " \u00b7 thumbnails left out past the size cap: " + D.thumbs_dropped : "");
  const t = el("table", "sum"), head = el("tr");
  const cols = CMP ? ["benchmark", "metric", "A", "B", "delta", "95% CI (paired bootstrap)", "paired samples", "changed"]
                   : ["benchmark", "metric", "score", "95% CI (clustered by video)", "evaluated", "failures", "extraction failures", "not scored"];
  cols.forEach((c) => head.appendChild(el("th", null, c))); t.appendChild(head);
  for (const [name, r] of Object.entries(D.benchmarks)) {
    const tr = el("tr");
    const cells = CMP ? [name, r.metric, fmt(r.score_a), fmt(r.score_b), r.delta === null ? "-" : (100 * r.delta).toFixed(2),
                         r.ci ? "[" + (100 * r.ci[0]).toFixed(2) + ", " + (100 * r.ci[1]).toFixed(2) + "]" : "-", r.paired, r.changed]
                      : [name, r.metric, fmt(r.score), r.ci95 ? "[" + fmt(r.ci95[0]) + ", " + fmt(r.ci95[1]) + "]" : "-",
                         r.evaluated + "/" + r.samples, r.failures, r.extraction_failures, r.not_scored];
    cells.forEach((c, k) => {
      const td = el("td", k === 4 && CMP ? "delta " + (r.delta > 0 ? "pos" : r.delta < 0 ? "neg" : "") : k === 3 && !CMP ? "ci" : null, c);
      if (k === 3 && !CMP) td.title = ciNote(r);
      tr.appendChild(td);
    });
    t.appendChild(tr);
  }
  $("summary").replaceChildren(t);
  if (CMP && D.tasks) {
    const tt = el("table", "sum"), h = el("tr");
    ["benchmark / task", "A", "B", "delta", "samples"].forEach((c) => h.appendChild(el("th", null, c))); tt.appendChild(h);
    for (const r of D.tasks) {
      const tr = el("tr");
      [r.benchmark + " / " + r.task, fmt(r.a), fmt(r.b), (100 * (r.b - r.a)).toFixed(2), r.n].forEach((c) => tr.appendChild(el("td", null, c)));
      tt.appendChild(tr);
    }
    const d = el("details"); d.appendChild(el("summary", null, "per-task accuracy, A vs B")); d.appendChild(tt);
    $("summary").appendChild(d);
  }
}
function filters() {
  options($("f-bench"), uniq((r) => r.b).map((v) => [v, v]), "all");
  options($("f-task"), uniq((r) => r.t).map((v) => [v, v]), "all");
  options($("f-field"), [...new Set(ROWS.flatMap((r) => Object.keys(r.g)))].sort().map((v) => [v, v]), "(none)");
  options($("f-value"), [], "all");
  options($("f-verdict"), D.verdicts.map((v) => [v, v.replace("_", " ")]), "all");
  $("f-field").addEventListener("change", () => {
    const f = $("f-field").value;
    options($("f-value"), f ? uniq((r) => (f in r.g ? r.g[f] : "unknown")).map((v) => [v, v]) : [], "all");
    refresh();
  });
  for (const id of ["f-bench", "f-task", "f-value", "f-verdict", "f-size"]) $(id).addEventListener("change", refresh);
  $("f-search").addEventListener("input", refresh);
  $("prev").addEventListener("click", () => { st.page = Math.max(0, st.page - 1); render(); });
  $("next").addEventListener("click", () => { st.page += 1; render(); });
}
function hay(r) {
  if (r._h === undefined) r._h = [r.id, r.b, r.t, r.q, r.r, r.e, r.a, JSON.stringify(r.x), r.m, r.ra].join("\n").toLowerCase();
  return r._h;
}
let shown = ROWS;
function refresh() { st.page = 0; render(); }
function render() {
  const b = $("f-bench").value, t = $("f-task").value, f = $("f-field").value, fv = $("f-value").value;
  const v = $("f-verdict").value, q = $("f-search").value.trim().toLowerCase();
  shown = ROWS.filter((r) => (!b || r.b === b) && (!t || r.t === t) && (!v || r.v === v)
    && (!f || !fv || (f in r.g ? r.g[f] : "unknown") === fv) && (!q || hay(r).includes(q)));
  const size = +$("f-size").value, pages = Math.max(1, Math.ceil(shown.length / size));
  st.page = Math.min(st.page, pages - 1);
  $("shown-count").textContent = shown.length;
  $("total-count").textContent = ROWS.length;
  $("page-info").textContent = "page " + (st.page + 1) + " / " + pages;
  const counts = {};
  for (const r of shown) counts[r.v] = (counts[r.v] || 0) + 1;
  const vc = $("verdict-counts"); vc.replaceChildren();
  for (const k of D.verdicts) if (counts[k]) { const s = el("span", "vc", k.replace("_", " ") + ": " + counts[k]); s.dataset.verdict = k; s.dataset.count = counts[k]; vc.appendChild(s); }
  const box = $("samples"); box.replaceChildren();
  for (const r of shown.slice(st.page * size, (st.page + 1) * size)) box.appendChild(card(r));
}
function block(label, text) {
  const d = el("div"); d.appendChild(el("div", "kv")).appendChild(el("b", null, label)); d.appendChild(el("pre", null, text)); return d;
}
function card(r) {
  const c = el("div", "card " + r.v), h = el("div", "head");
  if (CMP) h.appendChild(el("span", "badge " + r.va, "A: " + r.va.replace("_", " ")));
  h.appendChild(el("span", "badge " + r.v, (CMP ? "B: " : "") + r.v.replace("_", " ")));
  h.appendChild(el("b", null, r.b)); h.appendChild(el("span", null, r.t));
  h.appendChild(el("span", null, "score " + (CMP ? (r.sa === null ? "-" : r.sa.toFixed(2)) + " \u2192 " : "") + (r.s === null ? "-" : r.s.toFixed(2))));
  for (const [k, val] of Object.entries(r.g)) h.appendChild(el("span", "kv", k + ": " + val));
  h.appendChild(el("span", "id", r.id));
  c.appendChild(h);
  if (r.th !== null && r.th !== undefined) { const img = el("img", "th"); img.src = D.thumbs[r.th]; img.alt = "frames of " + r.m; c.appendChild(img); }
  else if (r.m) c.appendChild(el("div", "kv", "media: " + r.m + " (no frames loaded)"));
  c.appendChild(block("prompt", r.q));
  const resp = (x, e) => (x !== null && x !== undefined ? x : "(no response) " + (e || ""));
  if (CMP) { const g = el("div", "cols"); g.appendChild(block("response A", resp(r.ra, r.ea))); g.appendChild(block("response B", resp(r.r, r.e))); c.appendChild(g); }
  else c.appendChild(block("response", resp(r.r, r.e)));
  if (r.tt) r.tt.forEach((t, k) => {  // an episode: every turn, each call's result and its frames
    if (k === r.tt.length - 1 && !t.calls.length) return;  // the last turn is the response above
    c.appendChild(block("turn " + (k + 1), t.text));
    for (const call of t.calls) {
      c.appendChild(el("div", "kv call " + call.status, "\u2192 " + (call.name || "?") + " " + JSON.stringify(call.arguments) + ": " + call.status + ": " + call.text));
      if (call.thumb) { const img = el("img", "th"); img.src = call.thumb; img.alt = "frames " + (call.name || "") + " returned"; c.appendChild(img); }
    }
  });
  const kv = el("div", "kv");
  kv.appendChild(el("b", null, "answer ")); kv.appendChild(document.createTextNode(r.a + "   "));
  kv.appendChild(el("b", null, "extracted ")); kv.appendChild(document.createTextNode(r.x === null ? "(none)" : JSON.stringify(r.x)));
  c.appendChild(kv);
  if (Object.keys(r.d).length) c.appendChild(el("div", "kv", "score details: " + JSON.stringify(r.d)));
  return c;
}
summary(); filters(); render();
</script></body></html>
"""
