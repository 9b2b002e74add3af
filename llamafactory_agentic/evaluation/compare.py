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

r"""`llamafactory-agentic eval compare A B`: two finished runs under the same protocol, question by question.

Per benchmark: pass@1 of A and B and the difference B - A with a paired bootstrap over questions (each question's
score is its headline value averaged over runs; questions are resampled with replacement, the same draw for A and B):
a 95% percentile interval and a two-sided p-value (the share of bootstrap differences, centred on the observed one,
at least as far from zero as the observed difference; Efron and Tibshirani 1993, section 16.4). Also the tool-call
ratio B / A (tool calls per sample) and the questions that flipped (correct in most runs of one and not the other).
Runs with different protocol fingerprints, or a benchmark whose questions differ, are refused.
"""

import json
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np


class CompareError(ValueError):
    r"""The two runs cannot be compared (different fingerprints, unfinished runs, different questions)."""


def _load(run_dir: str | os.PathLike) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    run = Path(run_dir)
    metrics_path, scored_path = run / "metrics.json", run / "scored.jsonl"
    if not metrics_path.is_file() or not scored_path.is_file():
        raise CompareError(
            f"{run} is not a finished evaluation (metrics.json and scored.jsonl are written at the end)"
        )
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    records = [json.loads(line) for line in scored_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return metrics, records


def paired_bootstrap(
    a: np.ndarray, b: np.ndarray, samples: int = 10000, seed: int = 0, confidence: float = 0.95
) -> dict[str, float]:
    r"""Paired bootstrap of the mean difference `mean(b) - mean(a)` over questions.

    Args:
        a: Per-question scores of A, `[questions]`.
        b: Per-question scores of B, same questions in the same order.
        samples: Bootstrap resamples.
        seed: Seed of the resampling.
        confidence: Coverage of the percentile interval.

    Returns:
        `{"diff", "low", "high", "p_value"}`.

    Raises:
        ValueError: different lengths or no question.
    """
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired_bootstrap needs two equal-length non-empty arrays, got {a.shape} and {b.shape}")
    rng = np.random.default_rng(seed)
    delta = b - a
    observed = float(delta.mean())
    index = rng.integers(0, delta.size, size=(samples, delta.size))
    boot = delta[index].mean(axis=1)
    tail = (1.0 - confidence) / 2
    centred = boot - observed
    p_value = float(np.mean(np.abs(centred) >= abs(observed) - 1e-12)) if observed != 0 else 1.0
    return {
        "diff": observed,
        "low": float(np.quantile(boot, tail)),
        "high": float(np.quantile(boot, 1 - tail)),
        "p_value": min(1.0, p_value),
    }


def compare_runs(run_a: str | os.PathLike, run_b: str | os.PathLike, samples: int = 10000, seed: int = 0) -> dict:
    r"""Compare two finished evaluation runs (see the module docstring).

    Args:
        run_a: Output folder of run A (the baseline).
        run_b: Output folder of run B.
        samples: Bootstrap resamples.
        seed: Seed of the bootstrap.

    Returns:
        `{"fingerprint", "a", "b", "benchmarks": {name: {...}}}`.

    Raises:
        CompareError: unfinished runs, different fingerprints, or no benchmark in common.
    """
    metrics_a, records_a = _load(run_a)
    metrics_b, records_b = _load(run_b)
    if metrics_a["fingerprint"] != metrics_b["fingerprint"]:
        changed = sorted(
            k for k in set(metrics_a["protocol"]) | set(metrics_b["protocol"])
            if metrics_a["protocol"].get(k) != metrics_b["protocol"].get(k)
        )  # fmt: skip
        raise CompareError(
            f"the runs used different protocols (fingerprint {metrics_a['fingerprint']} vs {metrics_b['fingerprint']};"
            f" differing: {', '.join(changed)}): their scores are not comparable"
        )
    grouped: dict[str, dict[str, dict[str, list[dict]]]] = {"a": defaultdict(lambda: defaultdict(list)),
                                                          "b": defaultdict(lambda: defaultdict(list))}  # fmt: skip
    unscored: dict[str, Counter] = {"a": Counter(), "b": Counter()}
    for side, records in (("a", records_a), ("b", records_b)):
        for r in records:
            if r["headline"]["value"] is None:  # a generation or judge error: never scored, so never compared
                unscored[side][r["benchmark"]] += 1
                grouped[side][r["benchmark"]].setdefault(str(r["sample_id"]), [])
                continue
            grouped[side][r["benchmark"]][str(r["sample_id"])].append(r)
    common = [name for name in metrics_a["benchmarks"] if name in metrics_b["benchmarks"]]
    if not common:
        raise CompareError("the runs have no benchmark in common")
    out: dict[str, Any] = {"fingerprint": metrics_a["fingerprint"], "a": str(run_a), "b": str(run_b), "benchmarks": {}}
    for name in common:
        qa, qb = grouped["a"][name], grouped["b"][name]
        if set(qa) != set(qb):
            raise CompareError(
                f"{name}: the runs evaluated different questions ({len(qa)} in A, {len(qb)} in B; evaluate the same "
                "file with the same eval_max_samples)"
            )
        ids = sorted((i for i in qa if qa[i] and qb[i]), key=lambda s: (len(s), s))
        if not ids:
            raise CompareError(f"{name}: no question has a scored record in both runs (errors only); rerun them")
        differing = [i for i in ids if qa[i][0]["question"] != qb[i][0]["question"]]
        if differing:
            raise CompareError(f"{name}: the runs evaluated different questions (e.g. sample {differing[0]})")
        va = np.array([np.mean([r["headline"]["value"] for r in qa[i]]) for i in ids])
        vb = np.array([np.mean([r["headline"]["value"] for r in qb[i]]) for i in ids])
        ca = {i: np.mean([r["headline"]["correct"] for r in qa[i]]) > 0.5 for i in ids}
        cb = {i: np.mean([r["headline"]["correct"] for r in qb[i]]) > 0.5 for i in ids}
        calls_a = np.mean([sum(r["tool_counts"].values()) for i in ids for r in qa[i]])
        calls_b = np.mean([sum(r["tool_counts"].values()) for i in ids for r in qb[i]])
        stats = paired_bootstrap(va, vb, samples=samples, seed=seed)
        out["benchmarks"][name] = {
            "metric": qa[ids[0]][0]["headline"]["metric"],
            "questions": len(ids),
            "unscored_records": {"a": unscored["a"][name], "b": unscored["b"][name]},
            "questions_left_out": len(qa) - len(ids),
            "a": float(va.mean()),
            "b": float(vb.mean()),
            **stats,
            "tool_calls_a": float(calls_a),
            "tool_calls_b": float(calls_b),
            "tool_call_ratio": float(calls_b / calls_a) if calls_a else None,
            "gained": [{"sample_id": i, "question": qa[i][0]["question"]} for i in ids if cb[i] and not ca[i]],
            "lost": [{"sample_id": i, "question": qa[i][0]["question"]} for i in ids if ca[i] and not cb[i]],
        }
    return out


def format_comparison(result: dict[str, Any], max_flips: int = 10) -> str:
    r"""Markdown text of `compare_runs` output: a table, then the flipped questions per benchmark."""
    lines = [
        f"A = {result['a']}  \nB = {result['b']}  \nprotocol fingerprint {result['fingerprint']}",
        "",
        "| benchmark | metric | n | A | B | B - A | 95% CI | p | tool calls B/A | gained | lost |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, c in result["benchmarks"].items():
        ratio = "n/a" if c["tool_call_ratio"] is None else f"{c['tool_call_ratio']:.2f}"
        lines.append(
            f"| {name} | {c['metric']} | {c['questions']} | {100 * c['a']:.1f} | {100 * c['b']:.1f} | "
            f"{100 * c['diff']:+.1f} | [{100 * c['low']:+.1f}, {100 * c['high']:+.1f}] | {c['p_value']:.3f} | "
            f"{ratio} | {len(c['gained'])} | {len(c['lost'])} |"
        )
    for name, c in result["benchmarks"].items():
        if c.get("questions_left_out"):
            lines += [
                "",
                f"{name}: {c['questions_left_out']} questions left out (no scored record in one run: "
                f"{c['unscored_records']['a']} error records in A, {c['unscored_records']['b']} in B)",
            ]
    for name, c in result["benchmarks"].items():
        for label, flips in (("gained (wrong in A, right in B)", c["gained"]), ("lost", c["lost"])):
            if not flips:
                continue
            lines += ["", f"{name}, {label}:"]
            for flip in flips[:max_flips]:
                lines.append(f"- #{flip['sample_id']}: {flip['question'][:120]}")
            if len(flips) > max_flips:
                lines.append(f"- ... {len(flips) - max_flips} more")
    return "\n".join(lines) + "\n"
