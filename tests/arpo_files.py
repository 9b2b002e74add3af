# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Small files in the layouts of ARPO's released data, written by the suite itself (issue 35, deliver 1).

`write_synthetic_arpo(root)` writes `root/arpo/` as ARPO's release lays it out (the layouts are described in the
shared data folder's README and in `docs/data.md`): `rl/{train_10k,hard_search_1k,valid}.parquet` with the same
array/struct columns and Arrow types (including `hard_search_1k`'s `list<item: ...>` field name, its all-null `ability`
and its `reward_model` without `style`), the same known defects (`\\x08oxed` for `\\boxed` in every system prompt, one
row with a blank ground truth, other control characters in a few questions), `search_cache.json` (`{query: "Page 1:
..."}` with a few empty results) and `eval/*.jsonl` with each benchmark's fields. The content is invented (arithmetic
and questions about invented places), never copied from the release.

Tests receive an `ArpoData`: the folder, its tier (`synthetic` or `real`) and the facts a test checks that differ
between the tiers (row counts, the blank row's index, ...). The real tier's facts are those of ARPO's release.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from llamafactory_agentic.evaluation.reference import REFERENCE_PROMPTS


@dataclass(frozen=True)
class ArpoData:
    """A folder holding `arpo/` in the release's layout; `data / "arpo"` is `data.root / "arpo"`."""

    root: Path
    tier: str  # "synthetic" (written by the suite) or "real" (ARPO's released files)
    facts: dict[str, Any] = field(default_factory=dict)

    def __truediv__(self, part: str) -> Path:
        return self.root / part

    def __fspath__(self) -> str:
        return str(self.root)


def _control_message(counts: Counter, rows: int, kept: int) -> str:
    parts = ", ".join(f"U+{ord(c):04X} x{n}" for c, n in sorted(counts.items()))
    return f"{sum(counts.values())} other control characters ({parts}) in {rows}/{kept} rows"


REAL_FACTS: dict[str, Any] = {
    "rl_rows": {"train_10k": 10000, "hard_search_1k": 1071, "valid": 180},
    "blank_truth_row": {"train_10k": 5274},
    "abilities": {"train_10k": {"qa": 5000, "math": 4999}, "valid": {"math": 100, "qa": 80}},
    "hard_sources": {"DR_simpledeepsearch0.8k": 871, "DR_nan": 200},
    "control_chars": _control_message(Counter({"\x0b": 1, "\x0c": 25, "\x0d": 8}), 28, 9999),
    "form_feeds": 25,
    "valid_first_answer": "Eleanor Of Lancaster",
    "eval_rows": {
        "aime24": 30,
        "math500": 500,
        "gsm8k": 1319,
        "hotpotqa": 200,
        "2wiki": 200,
        "musique": 200,
        "bamboogle": 125,
    },  # fmt: skip
    "gsm8k_first_answer": "18",
    "aime24_first_id": 60,
    "search_total": 1000,
    "search_imported": 996,
    "search_min_documents": 5000,
    "search_query": "Amy Smart film debut Campfire Tales",
}

# ARPO's system prompt with the release's defect: a backspace where `\b` of `\boxed` was meant.
SYSTEM = REFERENCE_PROMPTS["code_search"].replace("\\boxed", "\x08oxed")

PLACES = [
    "Varnholm", "Ostrelia", "Kestmoor", "Dunharrow", "Peltavia", "Quorrin", "Althorne", "Brisembay", "Calloway Reach",
    "Drennick", "Elsworth Vale", "Fenmarch", "Glasswater", "Hollowmere", "Irongate", "Jessamine Bay", "Korvath",
    "Lindqvist Isle", "Marrowdale", "Northwick", "Oakhaven", "Pellucid", "Ravensholt", "Sorrento Fields", "Thistlewick",
    "Umberfall", "Veyrac", "Wendmoor", "Yarrowby", "Zellenport",
]  # fmt: skip
RIVERS = ["Selka", "Tarn", "Ombra", "Vessel", "Kirra", "Lune", "Morrow", "Ebbet"]
FOUNDERS = ["Ada Quill", "Bram Toller", "Cora Vint", "Dov Ashe", "Elin Marsh", "Faro Lind", "Greta Holm", "Hugo Pell"]


def _math_item(i: int) -> tuple[str, str]:
    a, b = 12 + 7 * i, 3 + (i % 9)
    if i % 3 == 0:
        return f"What is ${a} \\times {b}$?", str(a * b)
    if i % 3 == 1:
        return f"Simplify the fraction $\\frac{{{b}}}{{{2 * b}}}$ and give it in lowest terms.", "\\frac{1}{2}"
    return f"A crate holds {a} apples and {b} more are added each day. How many apples after {b} days?", str(a + b * b)


def _qa_item(i: int) -> tuple[str, str]:
    place, river, founder = PLACES[i % len(PLACES)], RIVERS[i % len(RIVERS)], FOUNDERS[i % len(FOUNDERS)]
    if i % 2 == 0:
        return f"Which river flows through the town of {place}?", f"{river} River"
    return f"Who founded the library of {place}?", founder


def _rl_row(i: int, ability: str | None, split: str, source: str, style: bool, tools_kwargs: bool) -> dict:
    question, truth = (_math_item if ability == "math" else _qa_item)(i)
    row = {
        "data_source": source,
        "prompt": [{"content": SYSTEM, "role": "system"}, {"content": question, "role": "user"}],
        "ability": ability,
        "reward_model": {"ground_truth": truth, **({"style": "rule"} if style else {})},
        "extra_info": {
            "index": i,
            **({"need_tools_kwargs": True} if tools_kwargs else {}),
            "question": question,
            "split": split,
        },  # fmt: skip
        "metadata": None,
    }
    return row


def _rl_schema(item_name: str, ability: pa.DataType, style: bool, tools_kwargs: bool) -> pa.Schema:
    message = pa.struct([("content", pa.string()), ("role", pa.string())])
    truth = [("ground_truth", pa.string())] + ([("style", pa.string())] if style else [])
    extra = [("index", pa.int64())] + ([("need_tools_kwargs", pa.bool_())] if tools_kwargs else [])
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.field(item_name, message))),
            ("ability", ability),
            ("reward_model", pa.struct(truth)),
            ("extra_info", pa.struct(extra + [("question", pa.string()), ("split", pa.string())])),
            ("metadata", pa.null()),
        ]
    )


def string_columns(rows: list[dict]) -> pa.Table:
    """The same rows as another export stores them: `prompt`, `reward_model`, `extra_info` as JSON strings."""
    return pa.table(
        {
            "data_source": [r["data_source"] for r in rows],
            "prompt": [json.dumps(r["prompt"]) for r in rows],
            "ability": [r["ability"] for r in rows],
            "reward_model": [json.dumps(r["reward_model"]) for r in rows],
            "extra_info": [json.dumps(r["extra_info"]) for r in rows],
            "metadata": ["null" for _ in rows],
        }
    )


def _write_rl(root: Path) -> dict[str, Any]:
    rl = root / "rl"
    rl.mkdir(parents=True)
    # train_10k: math and qa rows alternating in blocks, one blank ground truth, a few other control characters
    train = [_rl_row(i, "math" if i < 32 else "qa", "train", "DR_grpo_mix", True, True) for i in range(64)]
    blank = 21  # a math row, as the release's row 5274
    train[blank]["reward_model"]["ground_truth"] = " "
    controls = {3: "\x0c", 40: "\x0c\x0c", 45: "\x0d", 50: "\x0b\x0d"}
    for i, chars in controls.items():
        train[i]["prompt"][1]["content"] += f"{chars}(see figure)"
    pq.write_table(pa.Table.from_pylist(train, schema=_rl_schema("element", pa.string(), True, True)),
                   rl / "train_10k.parquet")  # fmt: skip
    # hard_search_1k: `list<item: ...>`, ability all null, no style, no need_tools_kwargs
    sources = ["DR_simpledeepsearch0.8k"] * 40 + ["DR_nan"] * 16
    hard = [_rl_row(100 + i, None, "train", s, False, False) for i, s in enumerate(sources)]
    pq.write_table(pa.Table.from_pylist(hard, schema=_rl_schema("item", pa.null(), False, False)),
                   rl / "hard_search_1k.parquet")  # fmt: skip
    valid = [_rl_row(200 + i, "qa" if i < 24 else "math", "valid", "DR_grpo_mix", True, True) for i in range(52)]
    pq.write_table(pa.Table.from_pylist(valid, schema=_rl_schema("element", pa.string(), True, True)),
                   rl / "valid.parquet")  # fmt: skip
    kept = len(train) - 1
    control_counts = Counter(c for chars in controls.values() for c in chars)
    return {
        "rl_rows": {"train_10k": len(train), "hard_search_1k": len(hard), "valid": len(valid)},
        "blank_truth_row": {"train_10k": blank},
        "abilities": {"train_10k": {"qa": 32, "math": 31}, "valid": {"qa": 24, "math": 28}},
        "hard_sources": dict(Counter(sources)),
        "control_chars": _control_message(control_counts, len(controls), kept),
        "form_feeds": control_counts["\x0c"],
        "valid_first_answer": valid[0]["reward_model"]["ground_truth"],
    }


def _write_search_cache(root: Path) -> dict[str, Any]:
    cache: dict[str, str] = {}
    for i, place in enumerate(PLACES):
        river, founder = RIVERS[i % len(RIVERS)], FOUNDERS[i % len(FOUNDERS)]
        pages = [
            f"{place} is a market town on the {river} River, known for its stone bridge and a weekly fish market.",
            f"The library of {place} was founded by {founder} in {1700 + 7 * i}; its reading room holds old maps.",
            f"Travel guide to {place}: ferries on the {river} leave hourly; the old town hall faces the harbour.",
            f"{place} population census {1900 + i}: {1200 + 37 * i} residents, mostly farmers and boat builders.",
        ]
        cache[f"{place} river town"] = "\n".join(f"Page {n}: {p}" for n, p in enumerate(pages, 1))
        cache[f"who founded the library of {place}"] = "\n".join(
            f"Page {n}: {p}" for n, p in enumerate([pages[1], f"{founder} was a scholar who lived in {place}."], 1)
        )
    cache["zzz unanswered question one"] = ""
    cache["zzz unanswered question two"] = "No search results found."
    (root / "search_cache.json").write_text(json.dumps(cache, ensure_ascii=False, indent=1), encoding="utf-8")
    empty = sum(1 for v in cache.values() if v.strip() in ("", "No search results found."))
    return {
        "search_total": len(cache),
        "search_imported": len(cache) - empty,
        "search_min_documents": 3 * len(PLACES),
        "search_query": next(iter(cache)),
    }


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _write_eval(root: Path) -> dict[str, Any]:
    out = root / "eval"
    out.mkdir()
    n = 8
    aime = []
    for i in range(n):
        question, answer = _math_item(3 * i)
        aime.append({"id": 60 + i, "problem": question, "solution": f"Multiply: {answer}.", "answer": answer,
                     "url": f"https://example.org/problem/{i}", "question": question})  # fmt: skip
    _write_jsonl(out / "aime24.jsonl", aime)
    _write_jsonl(out / "math500.jsonl", [{"question": q, "answer": a} for q, a in map(_math_item, range(n))])
    gsm = []
    for i in range(n):
        total = 10 + 8 * i
        gsm.append({"question": f"A farm has {total - 5} hens and buys 5 more. How many hens now?",
                    "answer": f"It has {total - 5} + 5 = <<{total - 5}+5={total}>>{total} hens.\n#### {total}",
                    "idx": str(i)})  # fmt: skip
    _write_jsonl(out / "gsm8k.jsonl", gsm)
    for k, name in enumerate(("hotpotqa", "2wiki", "musique", "bamboogle")):
        rows = []
        for i in range(n):
            question, answer = _qa_item(8 * k + i)
            rows.append({"question": question, "answer": [answer, answer.lower()]})
        _write_jsonl(out / f"{name}.jsonl", rows)
    return {
        "eval_rows": dict.fromkeys(("aime24", "math500", "gsm8k", "hotpotqa", "2wiki", "musique", "bamboogle"), n),
        "gsm8k_first_answer": "10",
        "aime24_first_id": 60,
    }


def write_synthetic_arpo(root: Path) -> ArpoData:
    """Write `root/arpo/{rl,eval}/...` and `root/arpo/search_cache.json`; returns the folder and its facts."""
    arpo = Path(root) / "arpo"
    arpo.mkdir(parents=True)
    facts = {**_write_rl(arpo), **_write_search_cache(arpo), **_write_eval(arpo)}
    return ArpoData(Path(root), "synthetic", facts)
