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

r"""A synthetic tool-use task family, generated from a seed: python computation, search look-ups, both, or neither.

The world is a fact base of invented people (`FactBase`): every person has a birth year, a home city and, for the
people questions are asked about, a mentor from a separate pool of mentors. Every look-up question is about a person
of its own (a name never repeats across questions), so answering needs the search tool and copying the name, never a
memorised fact. Each fact is one sentence, indexed by the local BM25 search backend (`tools.index.BM25Index`). Question kinds (`KINDS`):

* `python_arith` (`python`): integer arithmetic, e.g. `Compute 4817 * 392 % 97.`; code `print(4817 * 392 % 97)`.
* `python_count` (`python`): `How many times does 7 appear in the list [3, 7, 1, 7, 2]?`; code `print([...].count(7))`.
* `search_1hop` (`search`): `In which year was Bora Kelvi born?`; query `year was Bora Kelvi born`.
* `search_2hop` (`search` twice): `In which city does the mentor of Bora Kelvi live?`; queries `mentor of Bora Kelvi`,
  then `city does <mentor> live`.
* `search_python` (both tools): `What is the birth year of Bora Kelvi plus 37?`; query `birth year of Bora Kelvi`,
  then `print(1873 + 37)`.

The cold-start queries are the part of the question that names what is sought (as a person pastes part of a question
into a search engine); the facts are worded so that BM25 ranks the right one first for such a query.
* `no_tool`: the fact is given in the question (`Nalo Rimu lives in Kestrovale. In which city does Nalo Rimu live?`,
  about a person outside the fact base); answering directly is right, and a tool cannot help.

Answers are exact strings (integers or names) checked by the `em` reward. The `difficulty` knob (1-3) sets the
arithmetic (sums, products, modular products), the operand sizes, the list lengths and the size of the mentor pools.

Splits (`sft`, `train`, `heldout`) use disjoint people and mentors (and fresh people for `no_tool`), and no question
text occurs in two splits: a held-out search question can only be answered by searching, never from a fact that
training showed.

Cold-start trajectories (`build_sft_trajectory`) are deliberately imperfect, as real cold-start data is: with
`skip_tool_rate` a tool-needing question is answered without any tool call (the teacher "knew" the answer, which the
student cannot know), with `wrong_tool_rate` the first call uses the wrong tool and the trajectory recovers, and with
`extra_tool_rate` a `no_tool` question gets an unnecessary search. The observations are the real tools' outputs: search
results come from the built index through the `search` tool's own formatting, python outputs are the printed values of
the generated code (the code only prints one integer expression, so its output is exactly `str(value)`).
"""

import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..data.tags import wrap_observation


DATA_SOURCE = "synthetic_tool_use"
SYSTEM_PROMPT = "Use <search> to find facts and <python> to compute. Answer in \\boxed{}."
KINDS = ("python_arith", "python_count", "search_1hop", "search_2hop", "search_python", "no_tool")
TOOLS_OF_KIND = {
    "python_arith": ("python",),
    "python_count": ("python",),
    "search_1hop": ("search",),
    "search_2hop": ("search", "search"),
    "search_python": ("search", "python"),
    "no_tool": (),
}
SPLITS = ("sft", "train", "heldout")
SEARCH_SNIPPET_CHARS = 200

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CITY_SUFFIXES = ("vale", "ford", "ton", "mere", "holm", "wick")

# per difficulty: arithmetic, operand digits, list length and values, mentors per split, offsets added to years
_LEVELS = {
    1: {"arith": "add", "digits": 3, "list_len": 5, "list_max": 5, "mentors": 20, "offset": 50},
    2: {"arith": "mul", "digits": 3, "list_len": 8, "list_max": 9, "mentors": 40, "offset": 100},
    3: {"arith": "mulmod", "digits": 4, "list_len": 12, "list_max": 9, "mentors": 80, "offset": 1000},
}
DEFAULT_MIX = {
    "python_arith": 0.2,
    "python_count": 0.1,
    "search_1hop": 0.25,
    "search_2hop": 0.1,
    "search_python": 0.15,
    "no_tool": 0.2,
}


@dataclass
class TaskConfig:
    r"""What `generate_task` builds.

    Attributes:
        seed: Seed of every random choice (same seed, same files).
        difficulty: 1 (easy) to 3 (hard): arithmetic, operand sizes, list lengths, mentor pools (see `_LEVELS`).
        sizes: Questions per split: `{"sft": trajectories, "train": RL prompts, "heldout": evaluation prompts}`.
        mix: Weight of each kind in `KINDS` (normalised; missing kinds get 0).
        skip_tool_rate: Share of cold-start trajectories of tool-needing questions that answer without a tool.
        wrong_tool_rate: Share that first call the wrong tool, then recover with the right one.
        extra_tool_rate: Share of `no_tool` cold-start trajectories that make an unnecessary search first.
        search_topk: Snippets per search call in the cold-start observations; train with the same
            `agentic_search_topk`.
    """

    seed: int = 0
    difficulty: int = 1
    sizes: dict[str, int] = field(default_factory=lambda: {"sft": 600, "train": 800, "heldout": 100})
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    skip_tool_rate: float = 0.6
    wrong_tool_rate: float = 0.1
    extra_tool_rate: float = 0.1
    search_topk: int = 1

    def __post_init__(self) -> None:
        r"""Validate the knobs.

        Raises:
            ValueError: an unknown difficulty, kind or split, a negative size or weight, or rates outside [0, 1].
        """
        if self.difficulty not in _LEVELS:
            raise ValueError(f"difficulty must be one of {sorted(_LEVELS)}, got {self.difficulty!r}")
        unknown = set(self.mix) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown question kinds {sorted(unknown)} in mix; known: {', '.join(KINDS)}")
        if any(w < 0 for w in self.mix.values()) or sum(self.mix.values()) <= 0:
            raise ValueError(f"mix weights must be >= 0 with a positive sum, got {self.mix}")
        unknown = set(self.sizes) - set(SPLITS)
        if unknown:
            raise ValueError(f"unknown splits {sorted(unknown)} in sizes; known: {', '.join(SPLITS)}")
        if any(n < 0 for n in self.sizes.values()):
            raise ValueError(f"sizes must be >= 0, got {self.sizes}")
        for name in ("skip_tool_rate", "wrong_tool_rate", "extra_tool_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.search_topk < 1:
            raise ValueError(f"search_topk must be >= 1, got {self.search_topk}")
        if self.skip_tool_rate + self.wrong_tool_rate > 1.0:
            raise ValueError("skip_tool_rate + wrong_tool_rate must be <= 1")


@dataclass
class Person:
    r"""One entity of the fact base."""

    name: str
    born: int
    city: str
    split: str
    mentor: str | None = None


@dataclass
class Question:
    r"""One generated question with its exact answer and the tool calls that solve it.

    Attributes:
        kind: One of `KINDS`.
        question: The user message.
        answer: The exact answer (an integer as text, or a name).
        calls: `(tool, content)` of the solving calls, in order; the content of a call after a search may depend on
            that search's result (it is filled in from the fact base, which the result shows).
        split: `sft`, `train` or `heldout`.
        entities: Names of the fact-base people the question is about (empty for python and `no_tool`).
    """

    kind: str
    question: str
    answer: str
    calls: list[tuple[str, str]]
    split: str
    entities: list[str] = field(default_factory=list)


class FactBase:
    r"""Invented people with random attributes; mentor pools are disjoint per data split.

    Args:
        rng: The generator's random source.
        mentors_per_split: Mentors per split (every subject's mentor comes from its own split's pool).
    """

    def __init__(self, rng: random.Random, mentors_per_split: int) -> None:
        r"""Draw the cities and the mentor pools; subjects are added by `new_subject`."""
        self._used: set[str] = set()
        self.cities = sorted({self._word(rng, 2).capitalize() + rng.choice(_CITY_SUFFIXES) for _ in range(16)})
        self.people: dict[str, Person] = {}
        self.mentors = {split: [self._person(rng, split) for _ in range(mentors_per_split)] for split in SPLITS}

    def new_subject(self, rng: random.Random, split: str) -> Person:
        r"""A new person of `split` (fresh name, random attributes, a mentor from the split's pool)."""
        person = self._person(rng, split)
        person.mentor = rng.choice(self.mentors[split]).name
        return person

    def _word(self, rng: random.Random, syllables: int) -> str:
        return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))

    def fresh_name(self, rng: random.Random) -> str:
        r"""A person name not used before (two words of two syllables, e.g. `Bora Kelvi`)."""
        while True:
            name = f"{self._word(rng, 2).capitalize()} {self._word(rng, rng.choice((2, 3))).capitalize()}"
            if name not in self._used:
                self._used.add(name)
                return name

    def _person(self, rng: random.Random, split: str) -> Person:
        person = Person(self.fresh_name(rng), rng.randint(1700, 1999), rng.choice(self.cities), split)
        self.people[person.name] = person
        return person

    def documents(self) -> list[str]:
        r"""One sentence per fact (`X was born in the year 1873.`, `X lives in the city of Dornvale.`, `The mentor of X is Y.`)."""
        docs = []
        for person in self.people.values():
            docs.append(f"{person.name} was born in the year {person.born}.")
            docs.append(f"{person.name} lives in the city of {person.city}.")
            if person.mentor:
                docs.append(f"The mentor of {person.name} is {person.mentor}.")
        return docs


def _number(rng: random.Random, digits: int) -> int:
    return rng.randint(10 ** (digits - 1), 10**digits - 1)


def _arith(rng: random.Random, level: dict) -> tuple[str, int]:
    d = level["digits"]
    if level["arith"] == "add":
        a, b = _number(rng, d), _number(rng, d)
        expr = f"{a} + {b}"
    elif level["arith"] == "mul":
        expr = f"{_number(rng, d)} * {_number(rng, 2)}"
    else:
        expr = f"{_number(rng, d)} * {_number(rng, 3)} % {rng.randint(11, 97)}"
    return expr, eval(expr)  # noqa: S307 - an expression of integer literals built just above


def make_question(kind: str, split: str, facts: FactBase, rng: random.Random, level: dict) -> Question:
    r"""One question of `kind` about the `split`'s people (see the module docstring for the templates).

    Raises:
        ValueError: an unknown kind.
    """
    if kind == "python_arith":
        expr, value = _arith(rng, level)
        return Question(kind, f"Compute {expr}.", str(value), [("python", f"print({expr})")], split)
    if kind == "python_count":
        items = [rng.randint(1, level["list_max"]) for _ in range(level["list_len"])]
        target = rng.choice(items)
        listing = "[" + ", ".join(map(str, items)) + "]"
        question = f"How many times does {target} appear in the list {listing}?"
        return Question(kind, question, str(items.count(target)), [("python", f"print({listing}.count({target}))")],
                        split)  # fmt: skip
    if kind == "no_tool":
        name = facts.fresh_name(rng)
        if rng.random() < 0.5:
            year = rng.randint(1700, 1999)
            return Question(kind, f"{name} was born in {year}. In which year was {name} born?", str(year), [], split)
        city = rng.choice(facts.cities)
        return Question(kind, f"{name} lives in {city}. In which city does {name} live?", city, [], split)

    person = facts.new_subject(rng, split)
    if kind == "search_1hop":
        if rng.random() < 0.5:
            return Question(kind, f"In which year was {person.name} born?", str(person.born),
                            [("search", f"year was {person.name} born")], split, [person.name])  # fmt: skip
        return Question(kind, f"In which city does {person.name} live?", person.city,
                        [("search", f"city does {person.name} live")], split, [person.name])  # fmt: skip
    if kind == "search_2hop":
        mentor = facts.people[person.mentor]
        first = ("search", f"mentor of {person.name}")
        if rng.random() < 0.5:
            question = f"In which year was the mentor of {person.name} born?"
            return Question(kind, question, str(mentor.born), [first, ("search", f"year was {mentor.name} born")], split,
                            [person.name, mentor.name])  # fmt: skip
        question = f"In which city does the mentor of {person.name} live?"
        return Question(kind, question, mentor.city, [first, ("search", f"city does {mentor.name} live")], split,
                        [person.name, mentor.name])  # fmt: skip
    if kind == "search_python":
        offset = rng.randint(2, level["offset"])
        question = f"What is the birth year of {person.name} plus {offset}?"
        calls = [("search", f"birth year of {person.name}"), ("python", f"print({person.born} + {offset})")]
        return Question(kind, question, str(person.born + offset), calls, split, [person.name])
    raise ValueError(f"unknown question kind {kind!r}; known: {', '.join(KINDS)}")


def generate_questions(config: TaskConfig, facts: FactBase, rng: random.Random) -> dict[str, list[Question]]:
    r"""`config.sizes[split]` questions per split, kinds drawn from `config.mix`, no question text in two splits.

    Raises:
        RuntimeError: the fact base is too small to give that many distinct questions.
    """
    level = _LEVELS[config.difficulty]
    kinds = [k for k in KINDS if config.mix.get(k, 0) > 0]
    weights = [config.mix[k] for k in kinds]
    seen: set[str] = set()
    out: dict[str, list[Question]] = {}
    for split in SPLITS:
        questions: list[Question] = []
        attempts = 0
        while len(questions) < config.sizes.get(split, 0):
            attempts += 1
            if attempts > 50 * max(config.sizes.get(split, 0), 1) + 1000:
                raise RuntimeError(
                    f"could not draw {config.sizes[split]} distinct {split} questions at difficulty "
                    f"{config.difficulty}; lower the size or raise the difficulty (larger fact base)"
                )
            q = make_question(rng.choices(kinds, weights)[0], split, facts, rng, level)
            if q.question in seen:
                continue
            seen.add(q.question)
            questions.append(q)
        out[split] = questions
    return out


class ToolOracle:
    r"""Observations of the solving calls as the rollout would see them (search: the real `search` tool on the index).

    Args:
        index_dir: The folder of the built corpus and BM25 index.
        topk: Snippets per search (`agentic_search_topk` of the recipes).
        snippet_chars: Characters per snippet.
    """

    def __init__(self, index_dir: str | os.PathLike, topk: int = 1, snippet_chars: int = SEARCH_SNIPPET_CHARS):
        r"""Open the search tool on the index."""
        from ..tools.search import SearchTool

        self.search_tool = SearchTool(
            backend="local", topk=topk, snippet_chars=snippet_chars, index_dir=str(index_dir)
        )

    def observe(self, tool: str, content: str) -> str:
        r"""Tool output text (without the `<result>` wrapper) of one call."""
        if tool == "search":
            return self.search_tool.run(self.search_tool.parse(content)).text
        if tool == "python":
            expr = content.strip()
            if not (expr.startswith("print(") and expr.endswith(")")):
                raise ValueError(f"the oracle only runs generated print(...) code, got {content!r}")
            return str(eval(expr[len("print(") : -1]))  # noqa: S307 - integer expressions generated by this module
        raise ValueError(f"unknown tool {tool!r}")

    def close(self) -> None:
        r"""Release the search tool."""
        self.search_tool.close()


_THINK = {
    "python": "<think> I need to compute this. </think>",
    "search": "<think> I need to look this up. </think>",
    "both": "<think> I need to look this up, then compute. </think>",
    "skip": "<think> I know the answer. </think>",
    "given": "<think> The answer is in the question. </think>",
    "unsure": "<think> Let me check first. </think>",
}


def _answer(text: str) -> str:
    return f"<answer> \\boxed{{{text}}} </answer>"


def _call(tool: str, content: str, oracle: ToolOracle) -> str:
    return f" <{tool}> {content} </{tool}>" + wrap_observation(oracle.observe(tool, content))


def _wrong_call(question: Question) -> tuple[str, str]:
    r"""A plausible first call with the wrong tool (python for a look-up, search for a computation)."""
    tool = question.calls[0][0]
    if tool == "search":
        return "python", f"print({question.calls[0][1]!r})"
    return "search", question.question.rstrip("?.")


def build_sft_trajectory(question: Question, oracle: ToolOracle, rng: random.Random, config: TaskConfig) -> str:
    r"""Inline cold-start trajectory (`arpo_sft` layout) of one question; see the module docstring for its styles.

    Returns:
        The assistant text, e.g. `<think> ... </think> <search> X born </search> <result>\n...\n</result> <answer>
        \boxed{1873} </answer>`, observations written exactly as the rollout inserts them.
    """
    if not question.calls:
        if rng.random() < config.extra_tool_rate:
            name = question.question.split(" was born")[0].split(" lives")[0]
            query = f"year was {name} born" if " born" in question.question else f"city does {name} live"
            return _THINK["unsure"] + _call("search", query, oracle) + " " + _answer(question.answer)
        return _THINK["given"] + " " + _answer(question.answer)

    draw = rng.random()
    if draw < config.skip_tool_rate:
        return _THINK["skip"] + " " + _answer(question.answer)

    tools = {tool for tool, _ in question.calls}
    think = _THINK["both"] if len(tools) == 2 else _THINK[question.calls[0][0]]
    text = think
    if draw < config.skip_tool_rate + config.wrong_tool_rate:  # the wrong tool first (an unhelpful result)
        text += _call(*_wrong_call(question), oracle)
    for tool, content in question.calls:
        text += _call(tool, content, oracle)
    return text + " " + _answer(question.answer)


def rl_row(question: Question, index: int) -> dict[str, Any]:
    r"""One RL row in the `arpo_rl` layout (verl style)."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question.question}],
        "ability": question.kind,
        "reward_model": {"ground_truth": question.answer, "style": "rule"},
        "extra_info": {
            "index": index,
            "split": question.split,
            "kind": question.kind,
            "tools": list(TOOLS_OF_KIND[question.kind]),
        },
    }


def sft_row(question: Question, trajectory: str) -> dict[str, Any]:
    r"""One cold-start row in the `arpo_sft` layout (sharegpt with an inline trajectory)."""
    return {
        "system": SYSTEM_PROMPT,
        "conversations": [{"from": "human", "value": question.question}, {"from": "gpt", "value": trajectory}],
        "kind": question.kind,
    }


DATASET_FILES = {
    "synthetic_tool_sft": "sft.jsonl",
    "synthetic_tool_rl": "train.jsonl",
    "synthetic_tool_heldout": "heldout.jsonl",
}


def dataset_info(prefix: str = "") -> dict[str, dict[str, Any]]:
    r"""`dataset_info.json` entries of the generated files (`prefix`: their folder relative to `dataset_dir`)."""
    sft_columns = {"messages": "conversations", "system": "system"}
    return {
        "synthetic_tool_sft": {"file_name": prefix + "sft.jsonl", "formatting": "arpo_sft", "columns": sft_columns},
        "synthetic_tool_rl": {"file_name": prefix + "train.jsonl", "formatting": "arpo_rl"},
        "synthetic_tool_heldout": {"file_name": prefix + "heldout.jsonl", "formatting": "arpo_rl"},
    }


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def generate_task(config: TaskConfig, output_dir: str | os.PathLike) -> dict[str, Any]:
    r"""Generate the fact base, its search index, the RL rows and the cold-start trajectories into `output_dir`.

    Files: `facts.jsonl` (one fact per line), `search_index/` (`corpus.jsonl` and its BM25 index, for
    `agentic_search_index`), `train.jsonl` and `heldout.jsonl` (`arpo_rl`), `sft.jsonl` (`arpo_sft`),
    `dataset_info.json` (entries `synthetic_tool_sft`, `synthetic_tool_rl`, `synthetic_tool_heldout`, so
    `dataset_dir: <output_dir>` works) and `task.json` (the config and counts).

    Args:
        config: What to generate.
        output_dir: Folder to write into (created).

    Returns:
        The content of `task.json`: `{"config", "counts": {split: {kind: n}}, "sft_styles": {style: n}, "facts"}`.

    Raises:
        ValueError: from `TaskConfig`; RuntimeError: a fact base too small for the requested sizes.
    """
    from ..tools.index import BM25Index

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(config.seed)
    level = _LEVELS[config.difficulty]
    facts = FactBase(rng, level["mentors"])
    questions = generate_questions(config, facts, rng)
    docs = facts.documents()
    _write_jsonl(out / "facts.jsonl", [{"id": i, "text": d} for i, d in enumerate(docs)])
    index_dir = out / "search_index"
    index_dir.mkdir(exist_ok=True)
    _write_jsonl(index_dir / "corpus.jsonl", [{"id": i, "text": d} for i, d in enumerate(docs)])
    BM25Index(index_dir).ensure_built(force=True)

    oracle = ToolOracle(index_dir, topk=config.search_topk)
    styles: dict[str, int] = {}
    try:
        sft_rows = []
        for q in questions["sft"]:
            text = build_sft_trajectory(q, oracle, rng, config)
            style = _style(q, text)
            styles[style] = styles.get(style, 0) + 1
            sft_rows.append(sft_row(q, text))
    finally:
        oracle.close()
    _write_jsonl(out / "sft.jsonl", sft_rows)
    _write_jsonl(out / "train.jsonl", [rl_row(q, i) for i, q in enumerate(questions["train"])])
    _write_jsonl(out / "heldout.jsonl", [rl_row(q, i) for i, q in enumerate(questions["heldout"])])
    with open(out / "dataset_info.json", "w", encoding="utf-8") as f:
        json.dump(dataset_info(), f, indent=2)
        f.write("\n")
    counts = {split: _count_kinds(qs) for split, qs in questions.items()}
    summary = {"config": asdict(config), "counts": counts, "sft_styles": styles, "facts": len(docs)}
    with open(out / "task.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")
    return summary


def _count_kinds(questions: list[Question]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for q in questions:
        counts[q.kind] = counts.get(q.kind, 0) + 1
    return counts


def _style(question: Question, text: str) -> str:
    calls = text.count("</result>")
    if not question.calls:
        return "no_tool_direct" if calls == 0 else "no_tool_extra_call"
    if calls == 0:
        return "skipped_tool"
    if calls > len(question.calls):
        return "wrong_tool_then_recovered"
    return "correct_tool_use"
