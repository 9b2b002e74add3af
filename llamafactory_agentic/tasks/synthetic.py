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

The world is a company directory (`FactBase`): employees with numeric ids (never a number in 1900-2099, the years),
each with the year they joined, the city they work in and, for the employees questions are asked about, a manager from
a separate pool. Each fact is one sentence (`Employee #4817 joined in the year 1993.`, `Employee #4817 works in the
city of Dalumere.`, `The manager of employee #4817 is employee #2290.`), indexed by the local BM25 search backend
(`tools.index.BM25Index`). Every look-up question is about an employee no other split asks about, so answering needs
the search tool, never a memorised fact. Question kinds (`KINDS`; examples at difficulty 0):

* `python_arith` (`python`): integer arithmetic, e.g. `Compute 60 + 90.`; labelled code `print('60 + 90 =', 60 + 90)`,
  whose output `60 + 90 = 150` names what it computed, so the trajectory can restate it.
* `python_count` (`python`): `How many times does 3 appear in the list [3, 5, 1, 3, 2]?`; labelled code
  `print('count =', [3, 5, 1, 3, 2].count(3))`, output `count = 2`.
* `search_1hop` (`search`): `In which year did employee #4817 join?`; query `year did employee #4817 join`.
* `search_2hop` (`search` twice): `In which city does the manager of employee #4817 work?`; queries
  `manager of employee #4817`, then `city does employee #2290 work` (the manager's id read from the first result).
* `search_python` (both tools): `What is the joining year of employee #4817 plus 6?`; query
  `joining year of employee #4817`, then `print('1993 + 6 =', 1993 + 6)` (output `1993 + 6 = 1999`).
* `python_session_count` (`python_session` twice; stateful, weight 0 in the default mixes): `Let xs be the list
  [3, 5, 1, 3, 2]. How many times does 3 appear in xs?`; first call `xs = [3, 5, 1, 3, 2]` (empty output), then
  `print('count =', xs.count(3))`, which only works in the interpreter the first call defined `xs` in (the
  `python_session` environment, docs/tools.md "Environments"). Its rows carry `SESSION_SYSTEM_PROMPT`.
* `no_tool`: the fact is given in the question (`Employee #5120 works in Kestrovale. In which city does employee #5120
  work?`, an employee outside the directory); answering directly is right, and a tool cannot help.

The cold-start queries are the part of the question that names what is sought (as a person pastes part of a question
into a search engine); the facts are worded so that BM25 ranks the needed one first for such a query. Answers are exact
strings (integers or city names) checked by the `em` reward. The `difficulty` knob (`_LEVELS`) sets the arithmetic,
operand sizes, list lengths, id length, joining years and manager pools: 0 (the default, the demo's: what a model
trained from scratch on CPU learns) has 2-digit sums, 5-item lists of 1-5, 4-digit ids and joining years 1900-1999; 1
has 3-digit sums, 5-item lists and 3-digit ids (about 900 of them, so questions of one split share their employees:
at most 400, 200 and 100 per split); 2 has products of a 3-digit and a 2-digit number, 8-item lists of 1-9 and 4-digit
ids; 3 has modular products, 12-item lists and 5-digit ids. Joining years are 1950-2024 above difficulty 0.

Splits (`sft`, `train`, `heldout`) use disjoint employees and managers, and no question text occurs in two splits (a
repeated one is redrawn, kind included): a held-out look-up can only be answered by searching, never from a fact that
training showed. `no_tool` ids never belong to the directory (a fresh id per question, or at difficulty 1 one from a
pool of 100 ids outside it).

Cold-start trajectories (`build_sft_trajectory`) open with a `<think>` block that restates the question and the plan,
then make the solving calls; after each solving search, a `<think>` block restates the top snippet's fact (`<think>
Employee #4817 joined in the year 1993. </think>`), after each labelled python call the output (`<think> 60 + 90 = 150.
</think>`, `<think> count = 2. </think>`); the answer follows as `<answer> \boxed{...} </answer>`. They are
deliberately imperfect, as real cold-start data is: with `skip_tool_rate` a tool-needing question is answered without
any tool call, with a guess from the teacher's prior (`prior_guess`; by default mostly for the questions that look
easy, as real models under-use tools there: counts 0.7, one-hop look-ups 0.6, sums 0.3, the rest 0.1), with
`wrong_tool_rate` the first call uses the wrong tool (its result is not restated) and the trajectory recovers, and with
`extra_tool_rate` a `no_tool` question gets an unnecessary search (not restated either). The observations are the real
tools' outputs: search results come from the built index through the `search` tool's own formatting; python outputs are
what the generated `print(...)` prints, its arguments evaluated and joined by spaces (`ToolOracle`), which is what the
python tool prints for that code.
"""

import json
import os
import random
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..data.tags import wrap_observation


DATA_SOURCE = "synthetic_tool_use"
SYSTEM_PROMPT = "Use <search> to find facts and <python> to compute. Answer in \\boxed{}."
KINDS = ("python_arith", "python_count", "search_1hop", "search_2hop", "search_python", "no_tool")
# kinds whose second call uses a variable the first defined: they need the `python_session` environment (docs/tools.md
# "Environments"); weight 0 in the default mixes, asked for with e.g. `mix={"python_session_count": 1.0}`
STATEFUL_KINDS = ("python_session_count",)
ALL_KINDS = KINDS + STATEFUL_KINDS
SESSION_SYSTEM_PROMPT = (
    "Use <search> to find facts and <python_session> to compute; its variables persist between calls. "
    "Answer in \\boxed{}."
)
TOOLS_OF_KIND = {
    "python_arith": ("python",),
    "python_count": ("python",),
    "search_1hop": ("search",),
    "search_2hop": ("search", "search"),
    "search_python": ("search", "python"),
    "no_tool": (),
    "python_session_count": ("python_session", "python_session"),
}
SPLITS = ("sft", "train", "heldout")
SEARCH_SNIPPET_CHARS = 200

_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_CITY_SUFFIXES = ("vale", "ford", "ton", "mere", "holm", "wick")

# per difficulty: arithmetic, operand digits, list length and values, id digits, managers per split, largest offset
# added to a joining year (`search_python`), at most how many employees each split asks about (None: a new employee
# per question; 3-digit ids leave room for about 900 employees, so questions share them, and the ids outside the
# directory, for `no_tool`, come from a pool of 100 instead of a fresh id per question) and the joining years
# (default 1950-2024)
_LEVELS = {
    0: {
        "arith": "add",
        "digits": 2,
        "list_len": 5,
        "list_max": 5,
        "id_digits": 4,
        "managers": 20,
        "offset": 9,
        "subjects": None,
        "years": (1900, 1999),
    },
    1: {
        "arith": "add",
        "digits": 3,
        "list_len": 5,
        "list_max": 5,
        "id_digits": 3,
        "managers": 20,
        "offset": 50,
        "subjects": {"sft": 400, "train": 200, "heldout": 100},
    },
    2: {
        "arith": "mul",
        "digits": 3,
        "list_len": 8,
        "list_max": 9,
        "id_digits": 4,
        "managers": 40,
        "offset": 100,
        "subjects": None,
    },
    3: {
        "arith": "mulmod",
        "digits": 4,
        "list_len": 12,
        "list_max": 9,
        "id_digits": 5,
        "managers": 80,
        "offset": 1000,
        "subjects": None,
    },
}
# the cold-start teacher answers "easy-looking" questions (counting in a short list, one-hop look-ups) mostly without a
# tool, with a guess; what RL can fix
DEFAULT_SKIP_TOOL_RATE = {
    "python_count": 0.7,
    "search_1hop": 0.6,
    "python_arith": 0.3,
    "search_2hop": 0.1,
    "search_python": 0.1,
}
# snippets per search in the cold-start observations; training and evaluation read the same number
DEFAULT_SEARCH_TOPK = 1
DEFAULT_SFT_MIX = {
    "python_arith": 0.1,
    "python_count": 0.2,
    "search_1hop": 0.15,
    "search_2hop": 0.2,
    "search_python": 0.2,
    "no_tool": 0.15,
}
DEFAULT_MIX = {
    "python_arith": 0.1,
    "python_count": 0.25,
    "search_1hop": 0.25,
    "search_2hop": 0.1,
    "search_python": 0.15,
    "no_tool": 0.15,
}


@dataclass
class TaskConfig:
    r"""What `generate_task` builds.

    Attributes:
        seed: Seed of every random choice (same seed, same files).
        difficulty: 0 (easy, the default and the demo's) to 3 (hard): arithmetic, operand sizes, list lengths, ids,
            joining years, manager pools (`_LEVELS`, described in the module docstring).
        sizes: Questions per split: `{"sft": trajectories, "train": RL prompts, "heldout": evaluation prompts}`.
        mix: Weight of each kind in `KINDS` for the RL and held-out questions (normalised; missing kinds get 0).
        sft_mix: Weight of each kind for the cold-start trajectories (None: `mix`). The default cold-start set, like
            real cold-start data, comes from another distribution than the RL prompts: fewer sums and one-hop
            look-ups, more multi-step trajectories.
        skip_tool_rate: Share of cold-start trajectories of tool-needing questions that answer without a tool: one
            rate, or a rate per kind (kinds left out: 0).
        wrong_tool_rate: Share that first call the wrong tool, then recover with the right one.
        extra_tool_rate: Share of `no_tool` cold-start trajectories that make an unnecessary search first.
        search_topk: Snippets per search call in the cold-start observations; train with the same
            `agentic_search_topk`.
    """

    seed: int = 0
    difficulty: int = 0
    sizes: dict[str, int] = field(default_factory=lambda: {"sft": 600, "train": 800, "heldout": 100})
    mix: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_MIX))
    sft_mix: dict[str, float] | None = field(default_factory=lambda: dict(DEFAULT_SFT_MIX))
    skip_tool_rate: float | dict[str, float] = field(default_factory=lambda: dict(DEFAULT_SKIP_TOOL_RATE))
    wrong_tool_rate: float = 0.1
    extra_tool_rate: float = 0.1
    search_topk: int = DEFAULT_SEARCH_TOPK

    def __post_init__(self) -> None:
        r"""Validate the knobs.

        Raises:
            ValueError: an unknown difficulty, kind or split, a negative size or weight, or rates outside [0, 1].
        """
        if self.difficulty not in _LEVELS:
            raise ValueError(f"difficulty must be one of {sorted(_LEVELS)}, got {self.difficulty!r}")
        for name in ("mix", "sft_mix"):
            weights = getattr(self, name)
            if weights is None:
                continue
            unknown = set(weights) - set(ALL_KINDS)
            if unknown:
                raise ValueError(f"unknown question kinds {sorted(unknown)} in {name}; known: {', '.join(ALL_KINDS)}")
            if any(w < 0 for w in weights.values()) or sum(weights.values()) <= 0:
                raise ValueError(f"{name} weights must be >= 0 with a positive sum, got {weights}")
        unknown = set(self.sizes) - set(SPLITS)
        if unknown:
            raise ValueError(f"unknown splits {sorted(unknown)} in sizes; known: {', '.join(SPLITS)}")
        if any(n < 0 for n in self.sizes.values()):
            raise ValueError(f"sizes must be >= 0, got {self.sizes}")
        if isinstance(self.skip_tool_rate, dict):
            unknown = set(self.skip_tool_rate) - set(ALL_KINDS)
            if unknown:
                raise ValueError(
                    f"unknown question kinds {sorted(unknown)} in skip_tool_rate; known: {', '.join(ALL_KINDS)}"
                )
        for name in ("skip_tool_rate", "wrong_tool_rate", "extra_tool_rate"):
            value = getattr(self, name)
            for rate in value.values() if isinstance(value, dict) else [value]:
                if not 0.0 <= rate <= 1.0:
                    raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.search_topk < 1:
            raise ValueError(f"search_topk must be >= 1, got {self.search_topk}")
        if any(self.skip_rate(kind) + self.wrong_tool_rate > 1.0 for kind in ALL_KINDS):
            raise ValueError("skip_tool_rate + wrong_tool_rate must be <= 1 for every kind")

    def skip_rate(self, kind: str) -> float:
        r"""`skip_tool_rate` of one question kind."""
        if isinstance(self.skip_tool_rate, dict):
            return float(self.skip_tool_rate.get(kind, 0.0))
        return float(self.skip_tool_rate)


@dataclass
class Employee:
    r"""One entry of the directory."""

    id: int
    joined: int
    city: str
    split: str
    manager: int | None = None


@dataclass
class Question:
    r"""One generated question with its exact answer and the tool calls that solve it.

    Attributes:
        kind: One of `KINDS`.
        question: The user message.
        answer: The exact answer (an integer as text, or a city name).
        calls: `(tool, content)` of the solving calls, in order; the content of a call after a search may depend on
            that search's result (it is filled in from the fact base, which the result shows).
        split: `sft`, `train` or `heldout`.
        entities: Ids of the directory employees the question is about (empty for python and `no_tool`).
    """

    kind: str
    question: str
    answer: str
    calls: list[tuple[str, str]]
    split: str
    entities: list[int] = field(default_factory=list)


class FactBase:
    r"""A company directory with random attributes; manager pools are disjoint per data split.

    Args:
        rng: The generator's random source.
        managers_per_split: Managers per split (every subject's manager comes from its own split's pool).
        id_digits: Digits of an employee id (ids never fall in 1900-2099, the range of joining years).
        subjects_per_split: At most this many employees asked about per split (None: a new one per question).
        outside: Size of the pool of ids outside the directory (`no_tool` questions carry their own fact about them),
            drawn when `subjects_per_split` is set; otherwise every outside id is a fresh one.
        years: Range of joining years, inclusive.
    """

    def __init__(
        self,
        rng: random.Random,
        managers_per_split: int,
        id_digits: int = 4,
        subjects_per_split: dict[str, int] | None = None,
        outside: int = 100,
        years: tuple[int, int] = (1950, 2024),
    ) -> None:
        r"""Draw the cities and the manager pools; subjects are added by `new_subject`."""
        self.id_digits = id_digits
        self.years = years
        self.subjects_per_split = subjects_per_split
        self._used: set[int] = set()
        self.cities = sorted({self._word(rng, 2).capitalize() + rng.choice(_CITY_SUFFIXES) for _ in range(16)})
        self.employees: dict[int, Employee] = {}
        self.managers = {split: [self._employee(rng, split) for _ in range(managers_per_split)] for split in SPLITS}
        self.subjects: dict[str, list[Employee]] = {split: [] for split in SPLITS}
        self.outside = [self.fresh_id(rng) for _ in range(outside)] if subjects_per_split else None

    def new_subject(self, rng: random.Random, split: str) -> Employee:
        r"""An employee of `split` to ask about.

        A new one (fresh id, random attributes, a manager from the split's pool), or one already asked about once the
        split's cap is reached.
        """
        cap = self.subjects_per_split.get(split) if self.subjects_per_split else None
        if cap is not None and len(self.subjects[split]) >= cap:
            return rng.choice(self.subjects[split])
        employee = self._employee(rng, split)
        employee.manager = rng.choice(self.managers[split]).id
        self.subjects[split].append(employee)
        return employee

    def outside_id(self, rng: random.Random) -> int:
        r"""An id of an employee outside the directory (for questions that carry their own fact)."""
        return rng.choice(self.outside) if self.outside else self.fresh_id(rng)

    def _word(self, rng: random.Random, syllables: int) -> str:
        return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))

    def fresh_id(self, rng: random.Random) -> int:
        r"""An employee id not used before.

        Raises:
            RuntimeError: the id space of `id_digits` digits is exhausted.
        """
        low, high = 10 ** (self.id_digits - 1), 10**self.id_digits - 1
        if len(self._used) >= high - low + 1 - len(range(max(low, 1900), min(high, 2099) + 1)):
            raise RuntimeError(
                f"more than {len(self._used)} employees for {self.id_digits}-digit ids; lower the sizes or raise the "
                "difficulty (longer ids)"
            )
        while True:
            value = rng.randint(low, high)
            if value not in self._used and not 1900 <= value <= 2099:
                self._used.add(value)
                return value

    def _employee(self, rng: random.Random, split: str) -> Employee:
        employee = Employee(self.fresh_id(rng), rng.randint(*self.years), rng.choice(self.cities), split)
        self.employees[employee.id] = employee
        return employee

    def documents(self) -> list[str]:
        r"""One sentence per fact: `Employee #4817 joined in the year 1993.`, `... works in the city of Dalumere.`, ...

        and `The manager of employee #4817 is employee #2290.` for the employees questions are asked about.
        """
        docs = []
        for e in self.employees.values():
            docs.append(f"Employee #{e.id} joined in the year {e.joined}.")
            docs.append(f"Employee #{e.id} works in the city of {e.city}.")
            if e.manager is not None:
                docs.append(f"The manager of employee #{e.id} is employee #{e.manager}.")
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
    r"""One question of `kind` about the `split`'s employees (see the module docstring for the templates).

    Raises:
        ValueError: an unknown kind.
    """
    if kind == "python_arith":
        expr, value = _arith(rng, level)
        return Question(kind, f"Compute {expr}.", str(value), [("python", _print_labelled(expr))], split)
    if kind == "python_count":
        items = [rng.randint(1, level["list_max"]) for _ in range(level["list_len"])]
        target = rng.choice(items)
        listing = "[" + ", ".join(map(str, items)) + "]"
        question = f"How many times does {target} appear in the list {listing}?"
        code = f"print('count =', {listing}.count({target}))"
        return Question(kind, question, str(items.count(target)), [("python", code)], split)
    if kind == "python_session_count":
        items = [rng.randint(1, level["list_max"]) for _ in range(level["list_len"])]
        target = rng.choice(items)
        listing = "[" + ", ".join(map(str, items)) + "]"
        question = f"Let xs be the list {listing}. How many times does {target} appear in xs?"
        calls = [("python_session", f"xs = {listing}"), ("python_session", f"print('count =', xs.count({target}))")]
        return Question(kind, question, str(items.count(target)), calls, split)
    if kind == "no_tool":
        other = facts.outside_id(rng)  # not in the directory
        if rng.random() < 0.5:
            year = rng.randint(*facts.years)
            question = f"Employee #{other} joined in {year}. In which year did employee #{other} join?"
            return Question(kind, question, str(year), [], split)
        city = rng.choice(facts.cities)
        question = f"Employee #{other} works in {city}. In which city does employee #{other} work?"
        return Question(kind, question, city, [], split)

    e = facts.new_subject(rng, split)
    if kind == "search_1hop":
        if rng.random() < 0.5:
            return Question(kind, f"In which year did employee #{e.id} join?", str(e.joined),
                            [("search", f"year did employee #{e.id} join")], split, [e.id])  # fmt: skip
        return Question(kind, f"In which city does employee #{e.id} work?", e.city,
                        [("search", f"city does employee #{e.id} work")], split, [e.id])  # fmt: skip
    if kind == "search_2hop":
        manager = facts.employees[e.manager]
        first = ("search", f"manager of employee #{e.id}")
        if rng.random() < 0.5:
            question = f"In which year did the manager of employee #{e.id} join?"
            second = ("search", f"year did employee #{manager.id} join")
            return Question(kind, question, str(manager.joined), [first, second], split, [e.id, manager.id])
        question = f"In which city does the manager of employee #{e.id} work?"
        second = ("search", f"city does employee #{manager.id} work")
        return Question(kind, question, manager.city, [first, second], split, [e.id, manager.id])
    if kind == "search_python":
        offset = rng.randint(2, level["offset"])
        question = f"What is the joining year of employee #{e.id} plus {offset}?"
        calls = [
            ("search", f"joining year of employee #{e.id}"),
            ("python", _print_labelled(f"{e.joined} + {offset}")),
        ]
        return Question(kind, question, str(e.joined + offset), calls, split, [e.id])
    raise ValueError(f"unknown question kind {kind!r}; known: {', '.join(ALL_KINDS)}")


def generate_questions(config: TaskConfig, facts: FactBase, rng: random.Random) -> dict[str, list[Question]]:
    r"""`config.sizes[split]` questions per split, no question text in two splits.

    Kinds are drawn from `config.mix` (from `config.sft_mix` for the cold start).

    Raises:
        RuntimeError: the fact base is too small to give that many distinct questions.
    """
    level = _LEVELS[config.difficulty]
    seen: set[str] = set()
    out: dict[str, list[Question]] = {}
    for split in SPLITS:
        mix = config.sft_mix if split == "sft" and config.sft_mix is not None else config.mix
        kinds = [k for k in ALL_KINDS if mix.get(k, 0) > 0]
        weights = [mix[k] for k in kinds]
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
    r"""Observations of the solving calls as the rollout would see them.

    Search: the real `search` tool on the index. Python: the generated `print(...)`'s arguments evaluated and joined by
    spaces, as `print` does (`print('60 + 90 =', 60 + 90)` gives `60 + 90 = 150`): what the python tool prints for
    that code, without starting a sandbox per call. `python_session`: a generated list assignment (`xs = [3, 5]`)
    is kept in the oracle's session (empty output) and a generated `print(...)` is evaluated with those variables;
    `reset_session()` starts the next trajectory's.

    Args:
        index_dir: The folder of the built corpus and BM25 index.
        topk: Snippets per search (`agentic_search_topk` of the recipes).
        snippet_chars: Characters per snippet.
    """

    def __init__(
        self,
        index_dir: str | os.PathLike,
        topk: int = 1,
        snippet_chars: int = SEARCH_SNIPPET_CHARS,
        hidden_ids: set[int] | None = None,
    ):
        r"""Open the search tool on the index; `hidden_ids` are the employees the cold start must never show."""
        from ..tools.search import SearchTool

        self.hidden = re.compile(rf"#({'|'.join(str(i) for i in sorted(hidden_ids))})\b") if hidden_ids else None

        self.search_tool = SearchTool(
            backend="local", topk=topk, snippet_chars=snippet_chars, index_dir=str(index_dir)
        )
        self.session: dict[str, list[int]] = {}

    def reset_session(self) -> None:
        r"""Forget the `python_session` variables (a new trajectory)."""
        self.session = {}

    def reveals_hidden(self, observation: str) -> bool:
        r"""True when `observation` mentions one of the hidden (held-out) employees."""
        return bool(self.hidden and self.hidden.search(observation))

    def observe(self, tool: str, content: str) -> str:
        r"""Tool output text (without the `<result>` wrapper) of one call.

        Raises:
            ValueError: an unknown tool, or python code other than one generated `print(...)`.
        """
        if tool == "search":
            return self.search_tool.run(self.search_tool.parse(content)).text
        if tool == "python":
            expr = content.strip()
            if not (expr.startswith("print(") and expr.endswith(")")):
                raise ValueError(f"the oracle only runs generated print(...) code, got {content!r}")
            values = eval(f"[{expr[len('print(') : -1]}]")  # noqa: S307 - literals and integer expressions made here
            return " ".join(map(str, values))
        if tool == "python_session":
            code = content.strip()
            assignment = re.fullmatch(r"([a-z]+) = (\[[\d, ]*\])", code)
            if assignment:
                self.session[assignment.group(1)] = json.loads(assignment.group(2))
                return "Tool(python_session) returned empty output."
            if not (code.startswith("print(") and code.endswith(")")):
                raise ValueError(f"the oracle only runs generated assignments and print(...) code, got {content!r}")
            values = eval(f"[{code[len('print(') : -1]}]", {"__builtins__": {}}, dict(self.session))  # noqa: S307
            return " ".join(map(str, values))
        raise ValueError(f"unknown tool {tool!r}")

    def close(self) -> None:
        r"""Release the search tool."""
        self.search_tool.close()


def _think(question: Question, style: str) -> str:
    r"""The opening `<think>` block of a cold-start trajectory: the question restated, then the plan.

    Styles: `tool` (the solving plan), `skip` (answering from memory), `given` (the fact is in the question),
    `unsure` (an unnecessary look-up).
    """
    kind, calls = question.kind, question.calls
    if style == "given":
        return f"<think> The question says: {question.question.split('. In which ')[0]}. </think>"
    if style == "unsure":
        return "<think> Let me check first. </think>"
    if kind == "python_arith":
        expr = question.question[len("Compute ") : -1]
        plan = f"I need to compute {expr}." if style == "tool" else f"I can do {expr} in my head."
    elif kind == "python_count":
        listing, target = calls[0][1][len("print('count =', ") : -1].rsplit(".count(", 1)
        subject = f"{target.rstrip(')')} in {listing}"
        plan = f"I need to count {subject}." if style == "tool" else f"I can count {subject} in my head."
    elif kind == "python_session_count":
        target = calls[1][1].rsplit(".count(", 1)[1].rstrip(")")
        plan = f"I need to store xs, then count {target} in it." if style == "tool" else f"I can count {target} in xs."
    else:
        subject = f"employee #{question.entities[0]}"
        if style == "skip":
            plan = f"I know about {subject}."
        elif kind == "search_2hop":
            plan = f"I need to look up the manager of {subject}."
        elif kind == "search_python":
            plan = f"I need to look up {subject}, then compute."
        else:
            plan = f"I need to look up {subject}."
    return f"<think> Question: {question.question} {plan} </think>"


def _answer(text: str) -> str:
    return f"<answer> \\boxed{{{text}}} </answer>"


def _print_labelled(expr: str) -> str:
    r"""Code that prints an integer expression after its text: `print('481 + 392 =', 481 + 392)`."""
    return f"print('{expr} =', {expr})"


def _call(tool: str, content: str, oracle: ToolOracle) -> str:
    return f" <{tool}> {content} </{tool}>" + wrap_observation(oracle.observe(tool, content))


def _optional_call(tool: str, content: str, oracle: ToolOracle) -> str:
    r"""`_call` for a call the trajectory does not need (wrong tool first, unnecessary search), or "".

    "" when its observation would show a held-out employee: a look-up that matches nothing well returns whatever ranks
    first, possibly a held-out fact, and the cold start never shows held-out facts.
    """
    observation = oracle.observe(tool, content)
    if oracle.reveals_hidden(observation):
        return ""
    return f" <{tool}> {content} </{tool}>" + wrap_observation(observation)


def _wrong_call(question: Question) -> tuple[str, str]:
    r"""A plausible first call with the wrong tool (python for a look-up, search for a computation)."""
    tool = question.calls[0][0]
    if tool == "search":
        return "python", f"print({question.calls[0][1]!r})"
    return "search", question.question.rstrip("?.")


def prior_guess(question: Question) -> str:
    r"""What the cold-start teacher answers without a tool: a guess from its prior, not from the question's facts.

    A round number for a sum or product (`1000`), the year `2000` for a joining year (also one plus an offset), the
    city `Headquarters` for a city, `1` for a count. The guess carries no information a model could learn from, but it
    is not always wrong. At difficulty 0 it never is for sums (below 200), joining years (1900-1999) and cities (no
    such city); a joining year plus an offset of 2-9 is 2000 with probability 0.01, and `1` is the count whenever the
    target occurs once in the list: for a 5-item list of 1-5, with probability (4/5)**4, about 0.41.
    """
    if question.kind.startswith("python"):
        return "1000" if question.kind == "python_arith" else "1"
    if "city" in question.question:
        return "Headquarters"
    return "2000"


def build_sft_trajectory(question: Question, oracle: ToolOracle, rng: random.Random, config: TaskConfig) -> str:
    r"""Inline cold-start trajectory (`arpo_sft` layout) of one question; see the module docstring for its styles.

    The opening `<think>` restates the question and the plan; every solving search is followed by `<think> FACT
    </think>`, FACT the top snippet without its `Page 1: ` label, every labelled python call by `<think> OUTPUT.
    </think>` (`<think> 481 + 392 = 873. </think>`, `<think> count = 2. </think>`). A wrong-tool first call and an
    unnecessary search are not restated. Draws from `rng`: whether to skip the tool or call the wrong one first (one
    draw against `config.skip_rate(kind)` and `config.wrong_tool_rate`), or for a `no_tool` question whether to search
    anyway.

    Args:
        question: The question and its solving calls.
        oracle: Gives the observation of each call.
        rng: The generator's random source.
        config: The rates (`skip_tool_rate`, `wrong_tool_rate`, `extra_tool_rate`).

    Returns:
        The assistant text, e.g. `<think> Question: In which year did employee #4817 join? I need to look up employee
        #4817. </think> <search> year did employee #4817 join </search> <result>\nPage 1: Employee #4817 joined in the
        year 1993.\n</result> <think> Employee #4817 joined in the year 1993. </think> <answer> \boxed{1993}
        </answer>`, observations written exactly as the rollout inserts them (`data.tags.wrap_observation`).
    """
    if not question.calls:
        if rng.random() < config.extra_tool_rate:  # an unnecessary look-up (the employee is not in the directory)
            query = question.question.split("? ")[0].split(". In which ")[-1].rstrip("?")
            call = _optional_call("search", query, oracle)
            if call:
                return _think(question, "unsure") + call + " " + _answer(question.answer)
        return _think(question, "given") + " " + _answer(question.answer)

    draw = rng.random()
    skip = config.skip_rate(question.kind)
    if draw < skip:
        return _think(question, "skip") + " " + _answer(prior_guess(question))

    text = _think(question, "tool")
    oracle.reset_session()  # a new trajectory: a new `python_session`
    if draw < skip + config.wrong_tool_rate:  # the wrong tool first (an unhelpful result)
        text += _optional_call(*_wrong_call(question), oracle)
    for tool, content in question.calls:
        observation = oracle.observe(tool, content)
        text += f" <{tool}> {content} </{tool}>" + wrap_observation(observation)
        if tool == "search":  # the found fact, restated (what the next call or the answer is read from)
            text += f" <think> {_top_fact(observation)} </think>"
        elif observation.startswith("Tool("):  # an empty output (a `python_session` assignment): nothing to restate
            continue
        else:  # the labelled output, restated (`481 + 392 = 873.`, `count = 2.`)
            text += f" <think> {observation.strip()}. </think>"
    return text + " " + _answer(question.answer)


def _top_fact(observation: str) -> str:
    r"""The first snippet of a search observation without its `Page 1: ` label (the fact sentence)."""
    first = observation.strip().splitlines()[0]
    return first.split(": ", 1)[1] if first.startswith("Page ") else first


def _system_prompt(question: Question) -> str:
    return SESSION_SYSTEM_PROMPT if question.kind in STATEFUL_KINDS else SYSTEM_PROMPT


def rl_row(question: Question, index: int) -> dict[str, Any]:
    r"""One RL row in the `arpo_rl` layout (verl style)."""
    return {
        "data_source": DATA_SOURCE,
        "prompt": [
            {"role": "system", "content": _system_prompt(question)},
            {"role": "user", "content": question.question},
        ],
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
        "system": _system_prompt(question),
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
    facts = FactBase(
        rng,
        level["managers"],
        level["id_digits"],
        level["subjects"],
        level.get("outside", 100),
        level.get("years", (1950, 2024)),
    )
    questions = generate_questions(config, facts, rng)
    docs = facts.documents()
    _write_jsonl(out / "facts.jsonl", [{"id": i, "text": d} for i, d in enumerate(docs)])
    index_dir = out / "search_index"
    index_dir.mkdir(exist_ok=True)
    _write_jsonl(index_dir / "corpus.jsonl", [{"id": i, "text": d} for i, d in enumerate(docs)])
    BM25Index(index_dir).ensure_built(force=True)

    hidden = {e.id for e in facts.employees.values() if e.split == "heldout"}
    oracle = ToolOracle(index_dir, topk=config.search_topk, hidden_ids=hidden)
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
