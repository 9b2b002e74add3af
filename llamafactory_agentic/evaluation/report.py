# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

r"""`report.html`: one self-contained page per evaluation run (no network, no external files).

The page holds the per-benchmark table, the group averages, the protocol, and every trajectory (up to a cap the page
states) with its tags coloured (`<think>`, `<search>`, `<python>`, `<result>`, `<answer>`), tool calls with status,
cache hit and latency, the prediction, the gold answers and the judge's verdict and raw reply. Filters: benchmark,
run, wrong answers only, judge disagreeing with the rule (exact match or math-verify), and a text search. The data
travels as JSON inside the page and is rendered with DOM text nodes only, so model output can never inject markup.
"""

import html
import json
import os
from typing import Any

from .metrics import error_banner, protocol_lines, summary_rows


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#1f2328;background:#fff}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:28px}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:right}
th{background:#f6f8fa}td:first-child,th:first-child{text-align:left}
.controls{display:flex;gap:14px;flex-wrap:wrap;align-items:center;margin:10px 0;font-size:14px}
.card{border:1px solid #d0d7de;border-radius:6px;margin:8px 0;padding:0}
.card>summary{cursor:pointer;padding:6px 10px;font-size:13px;list-style:none}
.card[open]>summary{border-bottom:1px solid #d0d7de;background:#f6f8fa}
.ok{color:#1a7f37;font-weight:bold}.bad{color:#cf222e;font-weight:bold}
.body{padding:8px 12px;font-size:13px}
.response{white-space:pre-wrap;font-family:ui-monospace,Menlo,monospace;font-size:12px;background:#fbfbfb;
  border:1px solid #eee;padding:8px;max-height:600px;overflow:auto}
.tag{font-weight:bold;border-radius:3px;padding:0 2px}
.tag-think{color:#6e7781;background:#eaeef2}.in-think{color:#57606a}
.tag-search{color:#fff;background:#0969da}.in-search{color:#0969da;font-weight:600}
.tag-python{color:#fff;background:#8250df}.in-python{color:#8250df}
.tag-answer{color:#fff;background:#1a7f37}.in-answer{color:#1a7f37;font-weight:600}
.tag-result{color:#fff;background:#9a6700}.obs{background:#fff8c5;color:#4d2d00}
.calls td{text-align:left}.note{color:#9a6700}.err{color:#bc4c00;font-weight:bold}
.banner{border:2px solid #cf222e;background:#ffebe9;padding:8px 12px;border-radius:6px;font-weight:600}
.pager button{margin:0 4px}
"""

_JS = r"""
const DATA = JSON.parse(document.getElementById('report-data').textContent);
const PAGE = 50;
let page = 0;
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
const TAGS = /(<\/?(?:think|search|python|answer|result)>)/;
function renderText(parent, text, isObs) {
  const parts = text.split(TAGS);
  let open = null;
  for (const part of parts) {
    if (!part) continue;
    const m = part.match(/^<(\/?)(think|search|python|answer|result)>$/);
    if (m) {
      parent.appendChild(el('span', 'tag tag-' + m[2], part));
      open = m[1] ? null : m[2];
    } else {
      parent.appendChild(el('span', isObs ? 'obs' : (open ? 'in-' + open : ''), part));
    }
  }
}
function disagrees(t) {
  return t.judge && t.judge.correct !== null && (t.judge.source === 'judge' || t.judge.source === 'cache')
    && t.judge.correct !== t.rule_equivalent;
}
function filtered() {
  const bench = document.getElementById('f-bench').value;
  const run = document.getElementById('f-run').value;
  const wrong = document.getElementById('f-wrong').checked;
  const dis = document.getElementById('f-disagree').checked;
  const errs = document.getElementById('f-errors').checked;
  const q = document.getElementById('f-text').value.toLowerCase();
  return DATA.trajectories.filter(t =>
    (!bench || t.benchmark === bench) && (run === '' || String(t.run) === run) && (!wrong || !t.correct)
    && (!dis || disagrees(t)) && (!errs || t.unscored)
    && (!q || (t.question + ' ' + (t.prediction || '') + ' ' + t.answers.join(' ')).toLowerCase().includes(q)));
}
function card(t) {
  const d = el('details', 'card');
  d.dataset.key = t.key;
  const s = el('summary');
  if (t.unscored) s.appendChild(el('span', 'err', '\u26a0 ' + t.headline.source + ', not scored '));
  else s.appendChild(el('span', t.correct ? 'ok' : 'bad', t.correct ? '\u2713 ' : '\u2717 '));
  s.appendChild(el('span', '', `${t.benchmark} #${t.sample_id} run ${t.run} \u2014 prediction: `));
  s.appendChild(el('code', 'pred', t.prediction === null ? '(none)' : t.prediction));
  s.appendChild(el('span', '', ` \u2014 gold: ${t.answers.join(' | ')} \u2014 ${t.finish_reason}, `
    + `${t.tool_calls.length} tool calls, headline ${t.headline.metric}=`
    + (t.headline.value === null ? 'none' : t.headline.value.toFixed(2))));
  d.appendChild(s);
  d.addEventListener('toggle', () => { if (d.open && d.children.length === 1) d.appendChild(body(t)); });
  return d;
}
function body(t) {
  const b = el('div', 'body');
  b.appendChild(el('div', 'question', 'Question: ' + t.question));
  const sc = t.scores;
  b.appendChild(el('div', '', `EM ${sc.em} \u00b7 F1 ${Number(sc.f1).toFixed(3)} \u00b7 math-verify `
    + `${sc.math_equiv === null ? 'n/a' : sc.math_equiv} \u00b7 reward ${Number(sc.reward).toFixed(3)}`));
  if (t.judge) {
    b.appendChild(el('div', 'verdict', `Judge: ${t.judge.correct === null ? 'error' : (t.judge.correct ? 'correct'
      : 'incorrect')} (${t.judge.source})` + (t.judge.error ? ' \u2014 ' + t.judge.error : '')));
    if (t.judge.reply) b.appendChild(el('pre', 'reply', t.judge.reply));
  }
  if (t.reference && t.reference.scores) {
    const rs = t.reference.scores;
    b.appendChild(el('div', 'reference', `Reference scoring: prediction ${JSON.stringify(t.reference.prediction)} `
      + `\u00b7 EM ${rs.em} \u00b7 F1 ${Number(rs.f1).toFixed(3)} \u00b7 is_equiv ${rs.math_equal} \u00b7 headline `
      + (t.reference.headline.value === null ? 'not scored' : Number(t.reference.headline.value).toFixed(2))));
  }
  if (t.error) b.appendChild(el('div', 'bad', 'Engine error: ' + t.error));
  if (t.tool_calls.length) {
    const tb = el('table', 'calls');
    const hr = el('tr');
    ['#', 'tool', 'call', 'status', 'cache', 'latency s'].forEach(h => hr.appendChild(el('th', '', h)));
    tb.appendChild(hr);
    t.tool_calls.forEach((c, i) => {
      const r = el('tr');
      [i + 1, c.tool, c.content, c.status, c.cached ? 'hit' : 'miss', c.latency_s.toFixed(2)]
        .forEach(v => r.appendChild(el('td', '', v)));
      tb.appendChild(r);
    });
    b.appendChild(tb);
  }
  const resp = el('div', 'response');
  t.segments.forEach(([kind, text]) => renderText(resp, text, kind === 'obs'));
  b.appendChild(resp);
  return b;
}
function render() {
  const list = filtered();
  const pages = Math.max(1, Math.ceil(list.length / PAGE));
  page = Math.min(page, pages - 1);
  document.getElementById('count').textContent =
    `${list.length} of ${DATA.trajectories.length} trajectories shown` + DATA.cap_note;
  const box = document.getElementById('trajectories');
  box.replaceChildren(...list.slice(page * PAGE, (page + 1) * PAGE).map(card));
  document.getElementById('page').textContent = `page ${page + 1} / ${pages}`;
}
function init() {
  const sel = document.getElementById('f-bench');
  [...new Set(DATA.trajectories.map(t => t.benchmark))].forEach(b => sel.appendChild(el('option', '', b)));
  const runSel = document.getElementById('f-run');
  [...new Set(DATA.trajectories.map(t => t.run))].sort((a, b) => a - b)
    .forEach(r => { const o = el('option', '', r); o.value = String(r); runSel.appendChild(o); });
  ['f-bench', 'f-run', 'f-wrong', 'f-disagree', 'f-errors', 'f-text'].forEach(id =>
    document.getElementById(id).addEventListener('input', () => { page = 0; render(); }));
  document.getElementById('prev').addEventListener('click', () => { page = Math.max(0, page - 1); render(); });
  document.getElementById('next').addEventListener('click', () => { page += 1; render(); });
  render();
}
init();
"""


def _fmt(value: Any) -> str:
    if value is None or value == "":
        return ""
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def _table(rows: list[dict[str, Any]], table_id: str) -> str:
    if not rows:
        return ""
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(row.get(c)))}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f'<table id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _trajectory(record: dict[str, Any]) -> dict[str, Any]:
    from .scoring import rule_equivalent

    return {
        "key": record["key"],
        "benchmark": record["benchmark"],
        "sample_id": record["sample_id"],
        "run": record["run"],
        "question": record["question"],
        "answers": record["answers"],
        "prediction": record["prediction"],
        "finish_reason": record["finish_reason"],
        "error": record.get("error") or "",
        "segments": record["segments"],
        "tool_calls": record["tool_calls"],
        "scores": record["scores"],
        "judge": record.get("judge"),
        "headline": record["headline"],
        "reference": {k: v for k, v in (record.get("reference") or {}).items() if k != "judge"},
        "correct": bool(record["headline"]["correct"]),
        "unscored": record["headline"]["value"] is None,
        "rule_equivalent": rule_equivalent(record["scores"]),
    }


def _spread(records: list[dict[str, Any]], cap: int) -> list[dict[str, Any]]:
    r"""At most `cap` records, taken round-robin over benchmarks (file order within each), in run order."""
    if len(records) <= cap:
        return records
    queues: dict[str, list[int]] = {}
    for i, r in enumerate(records):
        queues.setdefault(r["benchmark"], []).append(i)
    chosen: list[int] = []
    position = 0
    while len(chosen) < cap:
        for indices in queues.values():
            if position < len(indices) and len(chosen) < cap:
                chosen.append(indices[position])
        position += 1
    return [records[i] for i in sorted(chosen)]


def write_report(
    path: str | os.PathLike,
    metrics: dict[str, Any],
    scored: list[dict[str, Any]],
    info: dict[str, Any],
    max_trajectories: int = 5000,
) -> str:
    r"""Write `report.html` and return its path.

    Args:
        path: Output file.
        metrics: The run's metrics (`metrics.json`).
        scored: Scored records (with `segments`), in run order.
        info: `run.json` plus `model_label`.
        max_trajectories: Most trajectories embedded (spread evenly over the sets); the page states the cap.
    """
    shown = _spread(scored, max(0, int(max_trajectories)))
    cap_note = (
        "" if len(shown) == len(scored) else f" (the report holds {len(shown)} of {len(scored)}, spread over the sets)"
    )
    data = {"trajectories": [_trajectory(r) for r in shown], "cap_note": cap_note}
    payload = json.dumps(data, ensure_ascii=False)
    payload = payload.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    rows = summary_rows(metrics)
    bench_rows = [r for r in rows if not str(r["benchmark"]).startswith("group:")]
    group_rows = [r for r in rows if str(r["benchmark"]).startswith("group:")]
    protocol = "".join(f"<li>{html.escape(line[2:])}</li>" for line in protocol_lines(info))  # value (source)
    warnings = "".join(f'<li class="note">{html.escape(w)}</li>' for w in info.get("warnings", []))
    title = f"Evaluation of {info['model_label']}"
    banner = error_banner(metrics)
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p>Protocol <code>{html.escape(info["protocol"]["preset"])}</code>, fingerprint
<code id="fingerprint">{html.escape(info["fingerprint"])}</code>, created {html.escape(info.get("created", ""))}.</p>
{f'<p class="banner" id="errors">{html.escape(banner)}</p>' if banner else ""}
<h2>Benchmarks</h2>
{_table(bench_rows, "benchmarks")}
{"<h2>Groups</h2>" + _table(group_rows, "groups") if group_rows else ""}
<h2>Protocol</h2><ul>{protocol}{warnings}</ul>
<h2>Trajectories</h2>
<div class="controls">
<label>benchmark <select id="f-bench"><option value="">all</option></select></label>
<label>run <select id="f-run"><option value="">all</option></select></label>
<label><input type="checkbox" id="f-wrong"> wrong answers only</label>
<label><input type="checkbox" id="f-disagree"> judge disagrees with the rule</label>
<label><input type="checkbox" id="f-errors"> errors only</label>
<label>search <input type="search" id="f-text" placeholder="question, prediction, gold"></label>
</div>
<div id="count"></div>
<div class="pager"><button id="prev">&larr; previous</button><span id="page"></span>
<button id="next">next &rarr;</button></div>
<div id="trajectories"></div>
<script id="report-data" type="application/json">{payload}</script>
<script>{_JS}</script>
</body></html>
"""
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
    return str(path)
