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

r"""Aggregates of scored records (docs/algorithms.md section 9) and the summary files.

Per benchmark: the headline pass@1 as mean ± sample standard deviation over the R runs (each run's mean over
questions), unbiased pass@k for every k <= R (Chen et al. 2021, arXiv 2107.03374, Eq. 1:
`1 - C(n - c, k) / C(n, k)` per question, averaged), the mean of every per-sample score, tool calls per sample and per
tool, tool calls per correct answer, duplicate queries, limit hits, stop reasons, tokens, latency, cache hits and
misses per tool (calls the tool ran or the cache answered; notices and empty calls excluded) and judge statistics. Groups (the papers' averages) average the headline pass@1 of their members that were evaluated.
"""

import csv
import io
import json
import math
from collections import Counter, defaultdict
from typing import Any

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    r"""Unbiased pass@k of one question with `c` correct out of `n` samples.

    Args:
        n: Samples (runs) of the question, >= 1.
        c: Correct samples, 0 <= c <= n.
        k: Budget, 1 <= k <= n.

    Returns:
        `1 - C(n - c, k) / C(n, k)`: the probability that a random size-k subset holds a correct sample.

    Raises:
        ValueError: arguments out of range.
    """
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def _mean_std(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None}
    arr = np.asarray(values, dtype=float)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0}


def pass_stats(records: list[dict[str, Any]], runs: int, profile: str = "current") -> dict[str, Any]:
    r"""pass@1 (`mean`, `std`, `per_run`) and unbiased pass@k of one benchmark's scored records under a profile.

    Args:
        records: Scored records (`headline` for `current`, `reference.headline` for `reference`).
        runs: R of the protocol.
        profile: `current` or `reference`.

    Returns:
        `{"pass@1": {...}, "pass@k": {k: value}, "runs_complete": int, "n_scored": int}`; records whose headline value
        is None (errors) are left out: pass@1 per run is the mean over that run's scored records, pass@k is over the
        questions with R scored runs.
    """
    by_run: dict[int, list[float]] = defaultdict(list)
    by_question: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        head = r["headline"] if profile == "current" else (r.get("reference") or {}).get("headline")
        if head is None or head.get("value") is None:
            continue
        by_run[int(r["run"])].append(head["value"])
        by_question[str(r["sample_id"])].append(bool(head["correct"]))
    full = [v for v in by_question.values() if len(v) >= runs]
    per_run = [float(np.mean(by_run[k])) for k in sorted(by_run)]
    return {
        "pass@1": {**_mean_std(per_run), "per_run": per_run},
        "pass@k": {
            str(k): float(np.mean([pass_at_k(len(v), sum(v), k) for v in full])) if full else None
            for k in range(1, runs + 1)
        },
        "runs_complete": len(per_run),
        "n_scored": sum(len(v) for v in by_question.values()),
    }


def aggregate_benchmark(records: list[dict[str, Any]], runs: int) -> dict[str, Any]:
    r"""Metrics of one benchmark from its scored records (each with `sample_id`, `run`, `headline`, `scores`, ...).

    Args:
        records: Scored records of the benchmark (`scored_record` output).
        runs: R of the protocol (pass@k is reported for k = 1..R over questions with R runs).

    Returns:
        A dict with `n_questions`, `n_records` (error records included), `n_scored` (records with a headline
        value), `errors` (`generation`: records whose generation failed after its retries; `judge`: records whose
        judge call failed), `headline_metric`, `headline_source`, `pass@1` (`mean`, `std`,
        `per_run`), `pass@k`, `metrics` (mean of every per-sample score), tool-call, token, latency, cache and judge
        statistics, and `answer_leak_rate` (`tools/answer_leak_rate`: the share of answered records with an
        observation that holds a reference answer, docs/plan.md §3; None when no record carries the check).
    """
    scores: dict[str, list[float]] = defaultdict(list)
    ref_scores: dict[str, list[float]] = defaultdict(list)
    tool_calls: Counter = Counter()
    finish: Counter = Counter()
    sources: Counter = Counter()
    judge: Counter = Counter()
    cache: dict[str, Counter] = defaultdict(Counter)
    total_calls = correct_total = duplicates = limit_hits = 0
    tokens: dict[str, list[int]] = defaultdict(list)
    latency = []
    generation_errors = judge_errors = 0
    leaks: list[bool] = []
    for r in records:
        sources[r["headline"]["source"]] += 1
        if r.get("finish_reason") == "error":  # never scored: no answer, no tool calls, no tokens to count
            generation_errors += 1
            continue
        ref = r.get("reference") or {}
        judge_errors += int(any((j or {}).get("source") == "error" for j in (r.get("judge"), ref.get("judge"))))
        for name, score in (ref.get("scores") or {}).items():
            ref_scores[name].append(float(score))
        for name, score in r["scores"].items():
            if score is not None and not isinstance(score, bool):
                scores[name].append(float(score))
        if r.get("judge") is not None:
            judge[
                "error" if r["judge"]["source"] == "error" else "correct" if r["judge"]["correct"] else "incorrect"
            ] += 1
            if r["judge"]["correct"] is not None:
                scores["judge"].append(float(r["judge"]["correct"]))
        for tool, count in r["tool_counts"].items():
            tool_calls[tool] += count
        total_calls += sum(r["tool_counts"].values())
        correct_total += int(bool(r["headline"]["correct"]))
        duplicates += r["duplicate_queries"]
        limit_hits += r["limit_hits"]
        finish[r["finish_reason"]] += 1
        for call in r["tool_calls"]:
            if call.get("status") in ("limit", "repeat", "empty"):
                continue
            cache[call["tool"]]["hits" if call.get("cached") else "misses"] += 1
        for name, count in r["tokens"].items():
            tokens[name].append(int(count))
        latency.append(float(r.get("latency_s") or 0.0))
        if r.get("answer_leak") is not None:  # records written before the leak check have no value
            leaks.append(bool(r["answer_leak"]))
    answered = len(records) - generation_errors
    metric = records[0]["headline"]["metric"] if records else None
    current, reference = pass_stats(records, runs), pass_stats(records, runs, "reference")
    return {
        "n_questions": len({str(r["sample_id"]) for r in records}),
        "n_records": len(records),
        "n_scored": current["n_scored"],
        "errors": {"generation": generation_errors, "judge": judge_errors},
        "runs_complete": current["runs_complete"],
        "headline_metric": metric,
        "headline_source": dict(sources),
        "pass@1": current["pass@1"],
        "pass@k": current["pass@k"],
        "reference": {
            "pass@1": reference["pass@1"],
            "pass@k": reference["pass@k"],
            "n_scored": reference["n_scored"],
            "metrics": {name: float(np.mean(values)) for name, values in sorted(ref_scores.items())},
        },
        "metrics": {name: float(np.mean(values)) for name, values in sorted(scores.items())},
        "tool_calls_per_sample": total_calls / answered if answered else 0.0,
        "tool_calls_per_sample_by_tool": {t: c / answered for t, c in sorted(tool_calls.items())},
        "tool_calls_per_correct": total_calls / correct_total if correct_total else None,
        "duplicate_queries": duplicates,
        "limit_hits": limit_hits,
        "answer_leak_rate": float(np.mean(leaks)) if leaks else None,
        "finish_reasons": dict(finish),
        "tokens_mean": {name: float(np.mean(values)) for name, values in sorted(tokens.items())},
        "cache": {tool: {"hits": c["hits"], "misses": c["misses"]} for tool, c in sorted(cache.items())},
        "judge_verdicts": dict(judge),
        "judge_errors": judge["error"],
        "latency_s_mean": float(np.mean(latency)) if latency else 0.0,
    }


def aggregate(
    scored: list[dict[str, Any]], runs: int, groups: dict[str, list[str]], order: list[str] | None = None
) -> dict[str, Any]:
    r"""`{"benchmarks": {name: aggregate_benchmark(...)}, "groups": {name: {...}}}` for every benchmark present.

    A group's `pass@1` is the mean of its evaluated members' headline pass@1; `missing` lists members without
    results (the average is then over fewer sets than the paper's and says so).
    """
    by_bench: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in scored:
        by_bench[r["benchmark"]].append(r)
    names = [n for n in (order or []) if n in by_bench] + sorted(n for n in by_bench if n not in (order or []))
    benchmarks = {name: aggregate_benchmark(by_bench[name], runs) for name in names}
    out_groups = {}
    for group, members in groups.items():
        present = [m for m in members if m in benchmarks and benchmarks[m]["pass@1"]["mean"] is not None]
        if not present:
            continue
        ref = [benchmarks[m]["reference"]["pass@1"]["mean"] for m in present]
        out_groups[group] = {
            "pass@1": float(np.mean([benchmarks[m]["pass@1"]["mean"] for m in present])),
            "reference_pass@1": float(np.mean(ref)) if all(v is not None for v in ref) else None,
            "members": present,
            "missing": [m for m in members if m not in present],
        }
    return {"benchmarks": benchmarks, "groups": out_groups}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}"


def summary_rows(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    r"""One flat row per benchmark and group (the columns of `summary.csv`)."""
    rows = []
    for name, b in metrics["benchmarks"].items():
        row = {
            "benchmark": name,
            "questions": b["n_questions"],
            "records": b["n_records"],
            "scored": b["n_scored"],
            "generation_errors": b["errors"]["generation"],
            "judge_errors": b["errors"]["judge"],
            "metric": b["headline_metric"],
            "pass@1_mean": b["pass@1"]["mean"],
            "pass@1_std": b["pass@1"]["std"],
            "reference_pass@1_mean": b["reference"]["pass@1"]["mean"],
            "reference_pass@1_std": b["reference"]["pass@1"]["std"],
        }
        row.update({f"pass@{k}": v for k, v in b["pass@k"].items() if k != "1"})
        row.update({f"reference_pass@{k}": v for k, v in b["reference"]["pass@k"].items() if k != "1"})
        row.update(
            {
                "em": b["metrics"].get("em"),
                "f1": b["metrics"].get("f1"),
                "reference_em": b["reference"]["metrics"].get("em"),
                "reference_f1": b["reference"]["metrics"].get("f1"),
                "reference_math_equal": b["reference"]["metrics"].get("math_equal"),
                "math_equiv": b["metrics"].get("math_equiv"),
                "judge": b["metrics"].get("judge"),
                "reward": b["metrics"].get("reward"),
                "tool_calls_per_sample": b["tool_calls_per_sample"],
                "tool_calls_per_correct": b["tool_calls_per_correct"],
                "answer_leak_rate": b.get("answer_leak_rate"),
                "note": note_of(b),
            }
        )
        rows.append(row)
    for name, g in metrics["groups"].items():
        rows.append({"benchmark": f"group:{name}", "pass@1_mean": g["pass@1"],
                     "reference_pass@1_mean": g.get("reference_pass@1"), "note": _group_note(g)})  # fmt: skip
    return rows


def note_of(b: dict[str, Any]) -> str:
    r"""Footnote text of a benchmark row (rule instead of judge, judge errors, incomplete runs)."""
    notes = []
    sources = b["headline_source"]
    if b["headline_metric"] == "judge" and sources.get("rule"):
        notes.append("no judge configured: rule-based equivalence (EM or math-verify) shown")
    errors = b["errors"]
    if errors["generation"]:
        notes.append(f"{errors['generation']} generation errors not scored (a rerun retries them)")
    if errors["judge"]:
        notes.append(f"{errors['judge']} judge errors" + (" not scored" if b["headline_metric"] == "judge" else "")
                     + " (a rerun asks again)")  # fmt: skip
    return "; ".join(notes)


def error_banner(metrics: dict[str, Any]) -> str:
    r"""One line on the run's errors for the summaries and the report ("" when there are none)."""
    e = metrics.get("errors") or {}
    if not e.get("total"):
        return ""
    verdict = "past" if e["exceeded"] else "within"
    return (
        f"ERRORS: {e['generation']} generation errors and {e['judge']} judge errors in {e['records']} records "
        f"({100 * e['rate']:.1f}%, {verdict} eval_max_error_rate {100 * e['max_rate']:.1f}%). They are not scored: "
        "pass@1 and pass@k are over the scored records only; run the same command again to retry them."
    )


def _group_note(g: dict[str, Any]) -> str:
    return f"over {len(g['members'])} of {len(g['members']) + len(g['missing'])} sets" if g["missing"] else ""


def write_summary_csv(metrics: dict[str, Any]) -> str:
    r"""The text of `summary.csv`."""
    rows = summary_rows(metrics)
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in columns})
    return buffer.getvalue()


def write_summary_md(metrics: dict[str, Any], info: dict[str, Any]) -> str:
    r"""The text of `summary.md`: one table of benchmarks, one of groups, the protocol and notes."""
    runs = info["protocol"]["runs"]
    ks = [str(k) for k in range(2, runs + 1)]
    head = ["benchmark", "n", "metric", f"pass@1 current (mean ± std over {runs} runs)"] + [f"pass@{k}" for k in ks]
    head += ["pass@1 reference", "EM", "F1", "F1 reference", "errors (gen/judge)", "tools/sample", "tools/correct",
             "answer leak", "notes"]  # fmt: skip
    banner = error_banner(metrics)
    lines = [
        f"# Evaluation of {info['model_label']}",
        "",
        f"Protocol `{info['protocol']['preset']}`, fingerprint `{info['fingerprint']}`; scores in %.",
        "",
        *([f"**{banner}**", ""] if banner else []),
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    for name, b in metrics["benchmarks"].items():
        p1 = b["pass@1"]
        mean_std = "n/a" if p1["mean"] is None else f"{_pct(p1['mean'])} ± {_pct(p1['std'])}"
        cells = [name, str(b["n_questions"]), b["headline_metric"], mean_std]
        cells += [_pct(b["pass@k"].get(k)) for k in ks]
        r1 = b["reference"]["pass@1"]
        cells.append("n/a" if r1["mean"] is None else f"{_pct(r1['mean'])} ± {_pct(r1['std'])}")
        cells += [_pct(b["metrics"].get("em")), _pct(b["metrics"].get("f1"))]
        cells.append(_pct(b["reference"]["metrics"].get("f1")))
        cells.append(f"{b['errors']['generation']}/{b['errors']['judge']}")
        per_correct = b["tool_calls_per_correct"]
        cells += [f"{b['tool_calls_per_sample']:.2f}", "n/a" if per_correct is None else f"{per_correct:.2f}"]
        cells.append(_pct(b.get("answer_leak_rate")))
        cells.append(note_of(b))
        lines.append("| " + " | ".join(cells) + " |")
    if metrics["groups"]:
        lines += ["", "| group | pass@1 current | pass@1 reference | sets |", "|---|---|---|---|"]
        for name, g in metrics["groups"].items():
            lines.append(f"| {name} | {_pct(g['pass@1'])} | {_pct(g.get('reference_pass@1'))} | "
                         f"{', '.join(g['members'])} {_group_note(g)} |")  # fmt: skip
    sets = info.get("benchmarks") or {}
    if sets:
        lines += ["", "| set | file | registry entry | task | headline metric | search |", "|---|---|---|---|---|---|"]
        for name, b in sets.items():
            metric = metrics["benchmarks"].get(name, {}).get("headline_metric") or b.get("metric")
            entry = b.get("registry_entry") or "none (defaults)"
            lines.append(f"| {name} | `{b.get('path')}` | {entry} | {b.get('task')} | {metric} | "
                         f"{b.get('search_mode')} |")  # fmt: skip
    lines += [
        "",
        "Scoring profiles: `current` is the plugin's (prediction only from a `\\boxed{}` in the last answer "
        "span; SQuAD normalisation without punctuation; math-verify); `reference` is RUC-NLPIR/ARPO's (bare "
        "answer text, then any `\\boxed{}`, then the last 5 lines; punctuation kept; MATH `is_equiv`). "
        "docs/algorithms.md section 9.3 explains the difference.",
    ]
    lines += ["", "Protocol (value, then where it came from: command line, config file, checkpoint or default):", ""]
    lines += protocol_lines(info)
    for warning in info.get("warnings", []):
        lines.append(f"- note: {warning}")
    return "\n".join(lines) + "\n"


def protocol_lines(info: dict[str, Any]) -> list[str]:
    r"""Markdown bullet lines of the protocol with each value's source (`config.protocol_sources`).

    Args:
        info: `run.json`'s content: `protocol`, and when the run recorded them `protocol_sources`,
            `training_config` (the `agentic_config.json` or recipe that `train_val` read) and the benchmarks' caps.

    Returns:
        One line per protocol value (`tools`, `reward` and `tool_call_limits` per entry), e.g.
        ``- `max_new_tokens`: `null` (checkpoint)``.
    """
    sources = info.get("protocol_sources") or {}

    def line(name: str, value: Any) -> str:
        source = sources.get(name)
        return f"- `{name}`: `{json.dumps(value, ensure_ascii=False)}`" + (f" ({source})" if source else "")

    lines = []
    for key, value in info["protocol"].items():
        nested = isinstance(value, dict) and any(name.startswith(f"{key}.") for name in sources)
        if nested:
            for sub, item in value.items():
                lines.append(line(f"{key}.{sub}", item))
            lines += [line(name, None) for name in sources if name.startswith(f"{key}.") and name[len(key) + 1 :]
                      not in value]  # fmt: skip
        else:
            lines.append(line(key, value))
    caps = {b.get("max_samples") for b in (info.get("benchmarks") or {}).values() if "max_samples" in b}
    if caps:
        lines.append(line("max_samples", caps.pop() if len(caps) == 1 else sorted(caps, key=str)))
    if info.get("training_config"):
        lines.append(f"- training config read by `train_val`: `{info['training_config']}`")
    return lines
