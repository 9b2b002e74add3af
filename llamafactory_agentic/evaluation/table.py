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

r"""`eval table RUN_DIR...`: checkpoints x benchmarks in the layout of the papers' Tables 1 and 2.

ARPO (arXiv 2507.19849) Table 1 has one row per model and the columns Mathematical Reasoning (AIME24, AIME25,
MATH500, GSM8K, MATH), Knowledge-Intensive Reasoning (WebWalker, HotpotQA, 2Wiki, MuSiQue, Bamboogle) and Avg.; Table 2
has the deep-search sets (GAIA, HLE, xbench-DeepSearch, WebWalker) and Avg. Each finished run (a folder with
`metrics.json`) is a row; each cell is pass@1 mean ± std over the runs in %, and a second table of the same layout
holds pass@k at the largest common k. Sets outside those tables go to a third table. Averages are over the sets the row
evaluated; a row missing some of a table's sets gets its average marked `*` with the count. Written as Markdown, CSV
(one line per checkpoint x set or average) and a self-contained HTML page.

Every cell says what it is over: `(n=Q)` questions, `of R` when the set's file has more rows than were evaluated
(`eval_max_samples`, the `paper` preset's 500), and `E/N unscored` when E of its N records are generation or judge
errors (never scored: the value is over the scored records only). What `eval compare` refuses is marked, not hidden:
a cell whose set was evaluated on other questions than in the first row holding the set (another file, or another
number of rows) is marked `†` with a footnote naming the counts, rows evaluated under another protocol fingerprint
are flagged above the tables,
and a row whose run had more errors than its `eval_max_error_rate` (`eval` exited 3) is marked `!` with its error
share.
"""

import csv
import html
import io
import json
import os
from pathlib import Path
from typing import Any

from .compare import CompareError


TABLES = (
    ("Table 1: reasoning", [("Mathematical Reasoning", "math"), ("Knowledge-Intensive Reasoning", "knowledge")],
     "reasoning"),
    ("Table 2: deep search", [("Deep Search", "deep_search")], "deep_search"),
)  # fmt: skip
LABELS = {"aime24": "AIME24", "aime25": "AIME25", "math500": "MATH500", "gsm8k": "GSM8K", "math": "MATH",
          "webwalker": "WebWalker", "hotpotqa": "HotpotQA", "2wiki": "2Wiki", "musique": "MuSiQue",
          "bamboogle": "Bamboogle", "gaia": "GAIA", "hle": "HLE", "xbench": "xbench-DS", "simpleqa": "SimpleQA"}  # fmt: skip


class TableError(CompareError):
    r"""A run folder cannot go into the table (not finished, or no metrics)."""


def _load(run: str | os.PathLike) -> dict[str, Any]:
    path = Path(run) / "metrics.json"
    if not path.is_file():
        raise TableError(f"{run}: no metrics.json (the run is not finished: run `eval` there, or `eval merge`)")
    metrics = json.loads(path.read_text(encoding="utf-8"))
    if not metrics.get("complete"):
        raise TableError(f"{run}: the run is not complete")
    return metrics


def _meta(run: str | os.PathLike) -> dict[str, Any]:
    path = Path(run) / "run.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _label(run: str | os.PathLike, metrics: dict[str, Any]) -> str:
    from .runner import model_label

    meta = _meta(run)
    return model_label(meta["model"]) if meta.get("model") else Path(run).name


def build_table(
    runs: list[str | os.PathLike], labels: list[str] | None = None, profile: str = "current"
) -> dict[str, Any]:
    r"""The table data of finished runs.

    Args:
        runs: Output folders of finished runs (one row each, in this order).
        labels: Row labels (default: the model name of each run, its folder name when two runs share one).
        profile: `current` or `reference` scoring (docs/algorithms.md section 9.3).

    Returns:
        `{"profile", "k", "rows": [label...], "tables": [{"title", "groups": [(title, [sets])], "average",
        "cells": {label: {set: {"pass@1", "std", "pass@k", "metric", "n", "rows", "records", "errors",
        "questions", "mismatch"}}}, "averages": {label: {...}}, "mismatched": {set: [text per row]}}],
        "fingerprints", "errors": {label: the run's error summary}}`; `mismatch` marks a cell whose set was evaluated
        on other questions in another row (what `eval compare` refuses).

    Raises:
        TableError: a run without finished metrics, a label count that does not match, or an unknown profile.
    """
    from .benchmarks import load_registry

    if profile not in ("current", "reference"):
        raise TableError(f"--profile must be current or reference, got {profile!r}")
    loaded = [_load(run) for run in runs]
    metas = [_meta(run) for run in runs]
    if labels and len(labels) != len(runs):
        raise TableError(f"{len(labels)} labels for {len(runs)} runs")
    names = list(labels) if labels else [_label(run, m) for run, m in zip(runs, loaded)]
    if len(set(names)) < len(names):
        names = [f"{name} ({Path(run).name})" for name, run in zip(names, runs)]
    groups = load_registry().groups
    k = min(int(m["protocol"]["runs"]) for m in loaded)

    def cell(bench: dict[str, Any], info: dict[str, Any]) -> dict[str, Any]:
        block = bench if profile == "current" else bench.get("reference") or {}
        p1 = block.get("pass@1") or {}
        errors = bench.get("errors") or {}
        n = int(bench.get("n_questions") or 0)
        return {
            "pass@1": p1.get("mean"),
            "std": p1.get("std"),
            "pass@k": (block.get("pass@k") or {}).get(str(k)),
            "metric": bench.get("headline_metric"),
            "n": n,
            "rows": info.get("rows"),  # rows of the file (runs written before this was kept: unknown)
            "records": int(bench.get("n_records") or 0),
            "errors": int(errors.get("generation") or 0) + int(errors.get("judge") or 0),
            # what the questions are: the file's hash and how many of its rows (the same pair: the same questions)
            "questions": (info.get("sha256"), int(info.get("samples") or n)),
            "mismatch": False,
        }

    present = [name for m in loaded for name in m["benchmarks"]]
    placed: set[str] = set()
    tables = []
    for title, parts, average in TABLES:
        group_sets = []
        for part_title, group in parts:
            sets = [s for s in groups.get(group, []) if s in present and (s not in placed or group == "deep_search")]
            if sets:
                group_sets.append((part_title, sets))
        if not group_sets:
            continue
        members = [s for _, sets in group_sets for s in sets]
        placed.update(members)
        tables.append({"title": title, "groups": group_sets, "average": average, "members": members})
    others = [s for s in dict.fromkeys(present) if s not in placed]
    if others:
        tables.append({"title": "Other sets", "groups": [("", others)], "average": None, "members": others})
    for table in tables:
        table["cells"], table["averages"] = {}, {}
        full = groups.get(table["average"], table["members"]) if table["average"] else table["members"]
        for name, m, meta in zip(names, loaded, metas):
            sets = meta.get("benchmarks") or {}
            row = {s: cell(m["benchmarks"][s], sets.get(s) or {}) for s in table["members"] if s in m["benchmarks"]}
            table["cells"][name] = row
            values = [c for c in row.values() if c["pass@1"] is not None]
            if table["average"] and values:
                ks = [c["pass@k"] for c in values]
                table["averages"][name] = {
                    "pass@1": sum(c["pass@1"] for c in values) / len(values),
                    "pass@k": sum(ks) / len(ks) if all(v is not None for v in ks) else None,
                    "sets": len(values),
                    "of": len(full),
                    "complete": all(s in row for s in full),
                }
        table["mismatched"] = {}
        for s in table["members"]:  # `eval compare` refuses a pair whose questions differ: mark it against row one
            have = [(name, table["cells"][name][s]) for name in names if s in table["cells"][name]]
            base_name, base = have[0]
            other = [(name, c) for name, c in have[1:] if c["questions"] != base["questions"]]
            for _, c in other:
                c["mismatch"] = True
            if other:
                table["mismatched"][s] = [f"{base_name} ({_count_text(base)})"] + [
                    f"{name} ({_count_text(c)})" for name, c in other
                ]
        for name, average in table["averages"].items():
            average["mismatch"] = any(c["mismatch"] for c in table["cells"][name].values())
    return {
        "profile": profile,
        "k": k,
        "rows": names,
        "tables": tables,
        "fingerprints": {name: m["fingerprint"] for name, m in zip(names, loaded)},
        "runs": {name: str(run) for name, run in zip(names, runs)},
        "errors": {name: dict(m.get("errors") or {}) for name, m in zip(names, loaded)},
    }


def _count_text(c: dict[str, Any]) -> str:
    r"""`n=Q`, `n=Q of R` (capped), `, E/N unscored` (error records): what a cell's value is over."""
    text = f"n={c['n']}"
    if c.get("rows") and int(c["rows"]) > c["n"]:
        text += f" of {c['rows']}"
    if c.get("errors"):
        text += f", {c['errors']}/{c['records']} unscored"
    return text


def _row_mark(data: dict[str, Any], name: str) -> str:
    r"""`!` for a row whose run had errors past its `eval_max_error_rate` (`eval` exited 3), else ""."""
    return "!" if (data.get("errors") or {}).get(name, {}).get("exceeded") else ""


def _notes(data: dict[str, Any], table: dict[str, Any]) -> list[str]:
    r"""Footnotes of one table: sets evaluated on other questions (`†`) and rows past their error rate (`!`)."""
    notes = []
    for s, (base, *others) in (table.get("mismatched") or {}).items():
        notes.append(
            f"† {LABELS.get(s, s)}: {', '.join(others)} evaluated other questions than {base}: not comparable with "
            "it (`eval compare` refuses such a pair); evaluate the same file with the same eval_max_samples"
        )
    for name in data["rows"]:
        e = (data.get("errors") or {}).get(name) or {}
        if _row_mark(data, name):
            notes.append(
                f"! {name}: {e.get('total', 0)} of {e.get('records', 0)} records ({100 * e.get('rate', 0.0):.1f}%) are "
                f"generation or judge errors, past its eval_max_error_rate ({100 * e.get('max_rate', 0.0):.1f}%; "
                "`eval` exited 3): they are not scored, its values are over the scored records only; run the same "
                "`eval` command again to retry them"
            )
    return notes


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _cell_text(c: dict[str, Any] | None, key: str) -> str:
    if c is None:
        return "–"
    if c["pass@1"] is None:
        value = "–"
    elif key == "pass@1":
        value = f"{_pct(c['pass@1'])} ± {_pct(c['std'])}"
    else:
        value = _pct(c["pass@k"])
    return f"{value} ({_count_text(c)})" + ("†" if c.get("mismatch") else "")


def _avg_text(a: dict[str, Any] | None, key: str) -> str:
    if a is None:
        return "–"
    text = _pct(a[key])
    return (text if a["complete"] else f"{text}*") + ("†" if a.get("mismatch") else "")


def _columns(table: dict[str, Any]) -> list[str]:
    return [s for _, sets in table["groups"] for s in sets]


def format_markdown(data: dict[str, Any]) -> str:
    r"""Markdown of `build_table` output: per table a pass@1 ± std block and a pass@k block."""
    lines = [f"Scores in %; scoring profile `{data['profile']}`; pass@1 is the mean ± std over runs, pass@{data['k']} "
             "the unbiased estimate over them; (n=questions, `of` the file's rows when capped, unscored error "
             "records).", ""]  # fmt: skip
    if len(set(data["fingerprints"].values())) > 1:
        lines += [
            "**The rows were evaluated under different protocols** (fingerprints "
            + ", ".join(f"{n}: `{f}`" for n, f in data["fingerprints"].items())
            + "): not comparable.",
            "",
        ]
    for table in data["tables"]:
        cols = _columns(table)
        for key, label in (("pass@1", "pass@1 ± std"), ("pass@k", f"pass@{data['k']}")):
            lines.append(f"### {table['title']} ({label})")
            lines.append("")
            if len(table["groups"]) > 1 or table["groups"][0][0]:
                spans = " | ".join(f"{t} ({', '.join(LABELS.get(s, s) for s in sets)})" for t, sets in table["groups"])
                lines += [f"Groups: {spans}.", ""]
            head = ["Checkpoint"] + [LABELS.get(s, s) for s in cols] + (["Avg."] if table["average"] else [])
            lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            for name in data["rows"]:
                row = table["cells"][name]
                cells = [name + _row_mark(data, name)] + [_cell_text(row.get(s), key) for s in cols]
                if table["average"]:
                    cells.append(_avg_text(table["averages"].get(name), key))
                lines.append("| " + " | ".join(cells) + " |")
            notes = [f"{n}: average over {a['sets']} of {a['of']} sets" for n, a in table["averages"].items()
                     if not a["complete"]]  # fmt: skip
            if notes:
                lines += ["", "\\* " + "; ".join(notes) + "."]
            lines += [line for note in _notes(data, table) for line in ("", note + ".")]
            lines.append("")
    return "\n".join(lines)


def format_csv(data: dict[str, Any]) -> str:
    r"""CSV of `build_table` output: one line per checkpoint and set or average."""
    buffer = io.StringIO()
    k = data["k"]
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["table", "group", "checkpoint", "set", "metric", "profile", "pass@1_mean", "pass@1_std",
                     f"pass@{k}", "sets", "n", "rows", "records", "errors", "comparable", "run_errors_exceeded",
                     "run"])  # fmt: skip
    for table in data["tables"]:
        for name in data["rows"]:
            for group, sets in table["groups"]:
                for s in sets:
                    c = table["cells"][name].get(s)
                    if c is not None:
                        writer.writerow([table["title"], group, name, s, c["metric"], data["profile"], c["pass@1"],
                                         c["std"], c["pass@k"], 1, c["n"], c["rows"] or "", c["records"],
                                         c["errors"], not c["mismatch"], bool(_row_mark(data, name)),
                                         data["runs"][name]])  # fmt: skip
            a = table["averages"].get(name)
            if a is not None:
                writer.writerow([table["title"], "Avg.", name, "Avg.", "", data["profile"], a["pass@1"], "",
                                 a["pass@k"], f"{a['sets']}/{a['of']}", "", "", "", "", not a.get("mismatch"),
                                 bool(_row_mark(data, name)), data["runs"][name]])  # fmt: skip
    return buffer.getvalue()


def format_html(data: dict[str, Any]) -> str:
    r"""A self-contained HTML page of `build_table` output (group headers spanning their sets, as in the papers)."""
    esc = html.escape
    parts = []
    for table in data["tables"]:
        cols = _columns(table)
        for key, label in (("pass@1", "pass@1 ± std"), ("pass@k", f"pass@{data['k']}")):
            top = '<th rowspan="2">Checkpoint</th>' + "".join(
                f'<th colspan="{len(sets)}">{esc(t)}</th>' for t, sets in table["groups"]
            )
            if table["average"]:
                top += '<th rowspan="2">Avg.</th>'
            sub = "".join(f"<th>{esc(LABELS.get(s, s))}</th>" for s in cols)
            body = ""
            for name in data["rows"]:
                row = table["cells"][name]
                cells = "".join(f"<td>{esc(_cell_text(row.get(s), key))}</td>" for s in cols)
                if table["average"]:
                    cells += f"<td><b>{esc(_avg_text(table['averages'].get(name), key))}</b></td>"
                body += f"<tr><td>{esc(name + _row_mark(data, name))}</td>{cells}</tr>"
            notes = "".join(f'<p class="note">{esc(note)}.</p>' for note in _notes(data, table))
            parts.append(
                f"<h2>{esc(table['title'])} ({esc(label)})</h2><table><thead><tr>{top}</tr><tr>{sub}</tr></thead>"
                f"<tbody>{body}</tbody></table>{notes}"
            )
    style = (
        "body{font-family:system-ui,sans-serif;margin:24px}table{border-collapse:collapse;font-size:13px;"
        "margin-bottom:18px}td,th{border:1px solid #d0d7de;padding:4px 8px;text-align:center}th{background:#f6f8fa}"
        "td:first-child{text-align:left}"
    )
    intro = (
        f"Scores in %; scoring profile <code>{esc(data['profile'])}</code>; pass@1 mean ± std over runs, "
        f"pass@{data['k']} unbiased; (n=questions, of the file's rows when capped, unscored error records); "
        "* average over fewer sets than the table has; † other questions than the first row (not comparable); ! errors "
        "past the run's eval_max_error_rate."
    )
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Evaluation table</title>'
        f"<style>{style}</style></head><body><h1>Evaluation table</h1><p>{intro}</p>{''.join(parts)}</body></html>\n"
    )


def write_table(data: dict[str, Any], output: str | os.PathLike) -> list[str]:
    r"""Write `table.md`, `table.csv` and `table.html` into the folder `output` (created); returns the paths."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("table.md", format_markdown(data)), ("table.csv", format_csv(data)),
                       ("table.html", format_html(data))):  # fmt: skip
        (out / name).write_text(text, encoding="utf-8")
        written.append(str(out / name))
    return written
