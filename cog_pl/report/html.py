"""``report.html``: the whole report in one self-contained page to explore (no network needed to open it).

The page holds the report's tables (``report.md``, converted), its figures (the PNGs, inline as data URLs) and a
per-concept table (:func:`cog_pl.report.concept_tables.concept_rows`) that sorts by any column (click its header) and
filters by level, model, method, name or wnid, and similarity range. The filter lives in the page's address
(``report.html#level=L5&model=dino&name=dog&min=0.2&max=0.6&sort=top1&dir=asc``), so a view can be shared or
bookmarked; the address is the whole view: opening ``#level=L4`` after other filters shows every model's L4
concepts, the filters it does not name cleared. At most :data:`SHOWN` matching concepts are drawn at once; the count
says how many match.
"""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

#: Matching concepts the explorer draws at once (the count line says how many match).
SHOWN = 1000


def _inline(text: str) -> str:
    """Inline markdown the report writes: ``code`` and **bold**, the rest escaped."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text, quote=False))
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)


def _slug(text: str, used: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    slug, i = base, 2
    while slug in used:
        slug, i = f"{base}-{i}", i + 1
    used.add(slug)
    return slug


def markdown_html(text: str) -> str:
    """The markdown the report writes (headings, tables, paragraphs, inline code and bold) as HTML."""
    out: list[str] = []
    used: set[str] = set()
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if not line:
            i += 1
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            title = line[level:].strip()
            out.append(f'<h{level} id="{_slug(title, used)}">{_inline(title)}</h{level}>')
            i += 1
        elif line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                block.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            head, body = block[0], [r for r in block[1:] if not all(set(c) <= set("-: ") for c in r)]
            out.append("<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in body)
                       + "</tbody></table>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(("#", "|")):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(out)


def explorer_data(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-concept rows in the page's compact form: the models, methods, levels and concepts once each, a row
    as indices into them and its numbers."""
    models = sorted({r["model"] for r in rows})
    methods = list(dict.fromkeys(r["method"] for r in rows))
    levels = list(dict.fromkeys(r["level"] for r in rows))
    concepts: dict[str, list] = {}
    for r in rows:
        c = concepts.setdefault(r["wnid"], [r["wnid"], r["name"], None, None, None])
        if r["similarity"] is not None:
            c[2:] = [round(r["similarity"], 4), r["closest_seen"], r["closest_seen_name"]]
        if r["taken_for"] and r["taken_for"] not in concepts:
            concepts[r["taken_for"]] = [r["taken_for"], r["taken_for_name"], None, None, None]
    index = {w: i for i, w in enumerate(concepts)}
    packed = [[models.index(r["model"]), methods.index(r["method"]), levels.index(r["level"]), index[r["wnid"]],
               None if r["top1"] is None else round(r["top1"], 2), r["images"], r["seeds"],
               index[r["taken_for"]] if r["taken_for"] else -1,
               None if r["taken_for_share"] is None else round(r["taken_for_share"], 1)] for r in rows]
    return {"models": models, "methods": methods, "levels": levels, "concepts": list(concepts.values()),
            "rows": packed}


_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;color:#1d232a}
h1{font-size:24px}h2{font-size:19px;margin-top:30px;border-bottom:1px solid #d0d7de}h3{font-size:16px}
table{border-collapse:collapse;margin:8px 0 12px;font-size:13px}
th,td{border:1px solid #d0d7de;padding:3px 7px;text-align:left;vertical-align:top}
thead th{background:#f3f5f7}code{background:#f3f5f7;padding:0 3px}
nav a{margin-right:14px}figure{margin:12px 0}figure img{max-width:100%;border:1px solid #d0d7de}
#explorer .controls{display:flex;flex-wrap:wrap;gap:10px;align-items:end;margin:8px 0}
#explorer label{display:flex;flex-direction:column;font-size:12px;color:#57606a}
#explorer input,#explorer select{font:inherit;padding:2px 4px}
#concepts th{cursor:pointer;user-select:none}#concepts th.sorted::after{content:" \\25B4"}
#concepts th.sorted.desc::after{content:" \\25BE"}#concepts td.num{text-align:right}
.meta{color:#57606a;font-size:12px}
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("concept-data").textContent);
  var C = D.concepts;
  var COLS = [
    ["model", function (r) { return D.models[r[0]]; }],
    ["method", function (r) { return D.methods[r[1]]; }],
    ["level", function (r) { return r[2]; }],
    ["concept", function (r) { return C[r[3]][1].toLowerCase(); }],
    ["similarity", function (r) { return C[r[3]][2]; }],
    ["closest seen", function (r) { return C[r[3]][4] || ""; }],
    ["top1", function (r) { return r[4]; }],
    ["images", function (r) { return r[5]; }],
    ["seeds", function (r) { return r[6]; }],
    ["taken for", function (r) { return r[8]; }]
  ];
  var ids = ["level", "model", "method", "name", "min", "max"];
  var el = {};
  ids.forEach(function (k) { el[k] = document.getElementById("f-" + k); });
  var state = {sort: null, dir: "asc"};

  function fill(select, values) {
    values.forEach(function (v) {
      var o = document.createElement("option"); o.value = v; o.textContent = v; select.appendChild(o);
    });
  }
  fill(el.level, D.levels); fill(el.model, D.models); fill(el.method, D.methods);

  function readHash() {
    var p = new URLSearchParams(location.hash.replace(/^#/, ""));
    // the address is the whole view: a filter it does not name is cleared, not kept from the view before
    ids.forEach(function (k) { el[k].value = p.has(k) ? p.get(k) : ""; });
    state.sort = p.get("sort"); state.dir = p.get("dir") === "desc" ? "desc" : "asc";
  }
  function writeHash() {
    var p = new URLSearchParams();
    ids.forEach(function (k) { if (el[k].value !== "") { p.set(k, el[k].value); } });
    if (state.sort) { p.set("sort", state.sort); p.set("dir", state.dir); }
    history.replaceState(null, "", "#" + p.toString());
  }
  function matches(r) {
    if (el.level.value && D.levels[r[2]] !== el.level.value) { return false; }
    if (el.model.value && D.models[r[0]] !== el.model.value) { return false; }
    if (el.method.value && D.methods[r[1]] !== el.method.value) { return false; }
    var c = C[r[3]];
    var q = el.name.value.trim().toLowerCase();
    if (q && c[1].toLowerCase().indexOf(q) < 0 && c[0].toLowerCase().indexOf(q) < 0) { return false; }
    var lo = parseFloat(el.min.value), hi = parseFloat(el.max.value);
    if ((!isNaN(lo) || !isNaN(hi)) && c[2] === null) { return false; }
    if (!isNaN(lo) && c[2] < lo) { return false; }
    if (!isNaN(hi) && c[2] > hi) { return false; }
    return true;
  }
  function key(name) {
    for (var i = 0; i < COLS.length; i++) { if (COLS[i][0] === name) { return COLS[i][1]; } }
    return null;
  }
  function cmp(a, b) {
    if (a === b) { return 0; }
    if (a === null || a === undefined) { return 1; }
    if (b === null || b === undefined) { return -1; }
    return a < b ? -1 : 1;
  }
  function cell(tr, text, cls) {
    var td = document.createElement("td"); td.textContent = text; if (cls) { td.className = cls; }
    tr.appendChild(td);
  }
  function fmt(v, d) { return v === null || v === undefined ? "\u2013" : v.toFixed(d); }
  function render() {
    var rows = D.rows.filter(matches);
    var k = state.sort ? key(state.sort) : null;
    if (k) {
      var sign = state.dir === "desc" ? -1 : 1;
      rows = rows.map(function (r, i) { return [r, i]; }).sort(function (a, b) {
        var va = k(a[0]), vb = k(b[0]);
        if (va === null || va === undefined || vb === null || vb === undefined) { return cmp(va, vb) || a[1] - b[1]; }
        return sign * cmp(va, vb) || a[1] - b[1];
      }).map(function (p) { return p[0]; });
    }
    var body = document.querySelector("#concepts tbody");
    body.textContent = "";
    rows.slice(0, D.shown).forEach(function (r) {
      var c = C[r[3]], tr = document.createElement("tr");
      tr.setAttribute("data-wnid", c[0]); tr.setAttribute("data-model", D.models[r[0]]);
      tr.setAttribute("data-level", D.levels[r[2]]);
      cell(tr, D.models[r[0]]); cell(tr, D.methods[r[1]]); cell(tr, D.levels[r[2]]);
      cell(tr, c[1] + " (" + c[0] + ")"); cell(tr, fmt(c[2], 3), "num");
      cell(tr, c[3] ? c[4] + " (" + c[3] + ")" : "\u2013");
      cell(tr, fmt(r[4], 1), "num"); cell(tr, String(r[5]), "num"); cell(tr, String(r[6]), "num");
      cell(tr, r[7] >= 0 ? C[r[7]][1] + " (" + C[r[7]][0] + "), " + fmt(r[8], 1) + " %" : "\u2013");
      body.appendChild(tr);
    });
    document.getElementById("concept-count").textContent = rows.length + " of " + D.rows.length + " concepts" +
      (rows.length > D.shown ? " (the first " + D.shown + " shown)" : "");
    document.querySelectorAll("#concepts th").forEach(function (th) {
      th.classList.toggle("sorted", th.getAttribute("data-key") === state.sort);
      th.classList.toggle("desc", th.getAttribute("data-key") === state.sort && state.dir === "desc");
    });
  }
  document.querySelectorAll("#concepts th").forEach(function (th) {
    th.addEventListener("click", function () {
      var k = th.getAttribute("data-key");
      state.dir = state.sort === k && state.dir === "asc" ? "desc" : "asc"; state.sort = k;
      writeHash(); render();
    });
  });
  ids.forEach(function (k) { el[k].addEventListener("input", function () { writeHash(); render(); }); });
  window.addEventListener("hashchange", function () { readHash(); render(); });
  readHash(); render();
})();
"""


def _figure(name: str, path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return (f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,{data}">'
            f"<figcaption class=meta>{html.escape(path.name)}</figcaption></figure>")


def report_html(markdown: str, figures: Mapping[str, Path], rows: list[dict[str, Any]],
                made: Mapping[str, str]) -> str:
    """The page: ``markdown`` (the report) as HTML, the ``figures`` (PNG paths by name) inline, the per-concept
    explorer over ``rows`` (:func:`cog_pl.report.concept_tables.concept_rows`), and ``made`` (how it was made:
    results file, date, ...) in its header."""
    data = {**explorer_data(rows), "shown": SHOWN}
    text = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    meta = " · ".join(f"{html.escape(k)}: {html.escape(str(v))}" for k, v in made.items())
    heads = "".join(f'<th data-key="{k}">{k}</th>' for k in ("model", "method", "level", "concept", "similarity",
                                                             "closest seen", "top1", "images", "seeds", "taken for"))
    explorer = f"""<section id="explorer"><h2 id="concept-explorer">Concept explorer</h2>
<p>Every concept's test top-1 (all data, pooled over seeds) for each model and method; similarity to the closest
seen concept for level concepts; what the IN-1K probe most often takes it for, where stored. Click a header to
sort; the filters are kept in the page's address.</p>
<div class="controls">
<label>level<select id="f-level"><option value="">all</option></select></label>
<label>model<select id="f-model"><option value="">all</option></select></label>
<label>method<select id="f-method"><option value="">all</option></select></label>
<label>name or wnid<input id="f-name" type="search" placeholder="e.g. dog"></label>
<label>similarity from<input id="f-min" type="number" step="0.01" min="0" max="1"></label>
<label>to<input id="f-max" type="number" step="0.01" min="0" max="1"></label>
</div>
<p id="concept-count" class="meta"></p>
<table id="concepts"><thead><tr>{heads}</tr></thead><tbody></tbody></table></section>"""
    figs = "".join(_figure(name, path) for name, path in figures.items())
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>ImageNet-CoG report</title><style>{_STYLE}</style></head>
<body>
<p class="meta">{meta}</p>
<nav><a href="#imagenet-cog-results">Tables</a><a href="#figures">Figures</a>
<a href="#concept-explorer">Concept explorer</a></nav>
{markdown_html(markdown)}
<h2 id="figures">Figures</h2>
{figs}
{explorer}
<script type="application/json" id="concept-data">{text}</script>
<script>{_SCRIPT}</script>
</body></html>
"""
