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

r"""Benchmark registry and loaders (docs/algorithms.md sections 8 and 9).

The registry (`evaluation/benchmarks.yaml` in the repository, installed under `share/llamafactory_agentic/`) maps a
name to its file, question and answer fields, answer reader, task and headline metric, and names the papers'
groups. `load_benchmark` reads a file in any of the reference's jsonl layouts (question under `question`, `Question`
or `problem`; the answer a string, a number, a list of aliases, a string holding a list literal, or GSM8K's rationale
ending in `#### value`) or in ARPO's RL layout (`format: arpo_rl`; parquet, or jsonl such as the `heldout.jsonl` of
`llamafactory-agentic task generate`, recognised by its `prompt` and `reward_model` fields). Every row is kept: a malformed row is an
error naming the file, the row and the field.
"""

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


REGISTRY_NAME = "benchmarks.yaml"
FORMATS = ("jsonl", "arpo_rl")
TASKS = ("math", "qa", "deep_search")
METRICS = ("f1", "judge", "em", "math_equiv", "reward", "accuracy")
ANSWER_READERS = ("plain", "gsm8k")
_GSM8K_VALUE = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


class BenchmarkError(ValueError):
    r"""A benchmark cannot be found or read; the message names the file, row and field and how to fix it."""


@dataclass
class BenchmarkSpec:
    r"""How to read one benchmark.

    Attributes:
        name: Registry name (or the file stem of a benchmark given as a path).
        files: Candidate file names relative to `eval_data_dir`; the first that exists is read.
        question_fields: Fields tried in order for the question.
        answer_field: Field of the gold answer(s).
        answer_reader: `plain` or `gsm8k` (see the module docstring).
        format: `jsonl` (one JSON object per line; `.json` holding a list also works) or `arpo_rl` (parquet).
        task: `math` (math-verify scoring too), `qa` or `deep_search`.
        metric: Headline metric: `f1` or `judge` (also `em`, `math_equiv`, `reward`, `accuracy` for own sets).
        search_mode: `snippets`, or `browse` for the sets the paper ran with page browsing.
        rows: Row count of the reference's file (None: unknown); a mismatch is reported.
        prompt: The reference harness's prompt type of the set (`code_search`; `code_search_cn` for xbench), used by
            `eval_system_prompt: reference`.
        aliases: Other names a file of this set goes by (matched case-insensitively, see `match_registry`).
        path: The file actually read (set by `resolve_file`).
        registry_entry: The registry entry whose settings apply (None: a file outside the registry, defaults).
    """

    name: str
    files: list[str] = field(default_factory=list)
    question_fields: list[str] = field(default_factory=lambda: ["question", "Question", "problem"])
    answer_field: str = "answer"
    answer_reader: str = "plain"
    format: str = "jsonl"
    task: str = "qa"
    metric: str = "f1"
    search_mode: str = "snippets"
    rows: int | None = None
    aliases: list[str] = field(default_factory=list)
    prompt: str = "code_search"
    path: str | None = None
    registry_entry: str | None = None

    def __post_init__(self) -> None:
        r"""Check the choices (the message names the registry entry)."""
        for attr, choices in (
            ("format", FORMATS),
            ("task", TASKS),
            ("metric", METRICS),
            ("answer_reader", ANSWER_READERS),
            ("search_mode", ("snippets", "browse")),
            ("prompt", ("code_search", "code_search_cn")),
        ):
            if getattr(self, attr) not in choices:
                raise BenchmarkError(
                    f"benchmark {self.name!r}: {attr} must be one of {list(choices)}, got {getattr(self, attr)!r}"
                )


@dataclass
class Sample:
    r"""One question of a benchmark.

    Attributes:
        benchmark: Benchmark name.
        sample_id: Row number in the file, as a string (stable while the file is unchanged; the file's hash is
            saved with the results).
        question: The question text.
        answers: Gold answers (aliases), at least one.
        task: `math`, `qa` or `deep_search` (the row's `ability` for `arpo_rl` files: `math` or `qa`).
        messages: Chat messages before the answer (`arpo_rl` rows: the user turn(s) of `prompt`); None for jsonl rows,
            which become one user message holding the question.
        system: The row's own system prompt (`arpo_rl`), else None (the configured one is used).
        metadata: Other fields of the row (ids, levels, annotator metadata, data_source, ...).
        label: The gold answer as the reference harness holds it (the answer field's value as read from the file: a
            list stays a list, GSM8K's value after `####`): the `reference` scoring profile prints it in its judge
            prompt and applies its `is_equiv` shortcut to it (docs/algorithms.md section 9.3). None: use `answers`.
    """

    benchmark: str
    sample_id: str
    question: str
    answers: list[str]
    task: str = "qa"
    messages: list[dict[str, str]] | None = None
    system: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    label: Any = None


@dataclass
class Benchmark:
    r"""A loaded benchmark: its spec, the file read, its SHA-256, the samples in file order and the file's row count."""

    spec: BenchmarkSpec
    path: str
    sha256: str
    samples: list[Sample]
    warnings: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass
class Registry:
    r"""Benchmark specs by name and the named groups (lists of benchmark names)."""

    benchmarks: dict[str, BenchmarkSpec]
    groups: dict[str, list[str]]
    path: str | None = None


def default_registry_path() -> Path | None:
    r"""The shipped registry: `evaluation/benchmarks.yaml` of the repository, else the installed copy.

    A regular (non-editable) install puts the file under `<prefix>/share/llamafactory_agentic/evaluation/`.
    """
    candidates = [
        Path(__file__).resolve().parents[2] / "evaluation" / REGISTRY_NAME,
        Path(sys.prefix) / "share" / "llamafactory_agentic" / "evaluation" / REGISTRY_NAME,
    ]
    return next((path for path in candidates if path.is_file()), None)


def load_registry(path: str | os.PathLike | None = None) -> Registry:
    r"""Read a registry YAML file (default: `default_registry_path()`).

    Raises:
        BenchmarkError: the file is missing or an entry is malformed (the message names the entry).
    """
    path = Path(path) if path is not None else default_registry_path()
    if path is None or not path.is_file():
        raise BenchmarkError(
            f"benchmark registry not found ({path or 'evaluation/benchmarks.yaml'}); set eval_registry to its path"
        )
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    defaults = dict(raw.get("defaults") or {})
    known = set(BenchmarkSpec.__dataclass_fields__) - {"name", "path", "registry_entry"}
    specs: dict[str, BenchmarkSpec] = {}
    for name, entry in (raw.get("benchmarks") or {}).items():
        values = {**defaults, **(entry or {})}
        unknown = set(values) - known
        if unknown:
            raise BenchmarkError(f"{path}: benchmark {name!r} has unknown keys {sorted(unknown)}")
        values.setdefault("files", [f"{name}.jsonl", f"{name}/test.jsonl"])
        specs[str(name)] = BenchmarkSpec(name=str(name), registry_entry=str(name), **values)
    groups = {str(k): [str(n) for n in v] for k, v in (raw.get("groups") or {}).items()}
    for group, members in groups.items():
        missing = [n for n in members if n not in specs]
        if missing:
            raise BenchmarkError(f"{path}: group {group!r} names unknown benchmarks {missing}")
    return Registry(benchmarks=specs, groups=groups, path=str(path))


_SPLIT_SUFFIX = re.compile(r"[-_. ](test|dev|val|valid|validation|eval|full)$")


def _key(text: str) -> str:
    return re.sub(r"[-_ ]", "", text.lower())


def match_registry(path: str | os.PathLike, registry: "Registry") -> str | None:
    r"""The registry entry a benchmark file belongs to, whatever its name's case, or None.

    Tried in order, all case-insensitive: the file's path ends with one of an entry's `files` (`SimpleQA.jsonl`,
    `gaia/test.jsonl`, `rl/hle_test.parquet`); its stem, with a split suffix such as `_test` or `-dev` removed and
    `-`, `_` and spaces ignored, is an entry's name or alias (`hle_test.parquet` -> hle, `XBench-DeepSearch.jsonl`
    -> xbench via its alias); a generic stem (`test`, `dev`, ...) falls back to the folder's name.

    Examples: `/d/SimpleQA.jsonl` -> simpleqa; `/d/gaia_test.parquet` -> gaia; `/d/AIME25/test.jsonl` -> aime25;
    `/d/mine.jsonl` -> None.
    """
    path = Path(path)
    parts = [p.lower() for p in path.parts]
    for name, spec in registry.benchmarks.items():
        for candidate in spec.files:
            tail = [p.lower() for p in Path(candidate).parts]
            if parts[-len(tail) :] == tail:
                return name
    names = {_key(name): name for name in registry.benchmarks}
    for name, spec in registry.benchmarks.items():
        names.update({_key(alias): name for alias in spec.aliases})
    stem = path.name.split(".")[0].lower()
    stripped = _SPLIT_SUFFIX.sub("", stem)
    for candidate in (stem, stripped):
        if _key(candidate) in names:
            return names[_key(candidate)]
    if stripped in ("test", "dev", "val", "valid", "validation", "eval", "train") and path.parent.name:
        return names.get(_key(path.parent.name))
    return None


def _looks_like_path(entry: str) -> bool:
    return entry.endswith((".jsonl", ".json", ".parquet")) or os.sep in entry or entry.startswith(".")


def resolve_benchmarks(entries: list[Any], registry: Registry, data_dir: str | None) -> list[BenchmarkSpec]:
    r"""Specs for `eval_benchmarks` entries: registry names, group names, file paths, or mappings.

    A file that belongs to a registry entry (`match_registry`: `SimpleQA.jsonl`, `hle_test.parquet`,
    `gaia/test.jsonl`, whatever the case) uses that entry's reader, task and headline metric; any other file gets the
    defaults (question fields, plain answers, `qa`, headline `f1`; `arpo_rl` for `.parquet` and for jsonl rows in that
    layout). `name=path` names a file: a registry name applies its entry whatever the file is called; another name
    keeps the file's own match. A mapping `{name, path, task, metric, ...}` sets any `BenchmarkSpec` field over the
    entry of its name (or of its file). Duplicates are dropped (first wins).

    Raises:
        BenchmarkError: an unknown name (the message lists the registry) or a missing file.
    """
    out: dict[str, BenchmarkSpec] = {}
    for raw in entries:
        if isinstance(raw, dict):
            values = dict(raw)
            if "path" not in values or "name" not in values:
                raise BenchmarkError(f"benchmark entry {raw} needs `name` and `path`")
            unknown = set(values) - set(BenchmarkSpec.__dataclass_fields__)
            if unknown:
                raise BenchmarkError(f"benchmark entry {values['name']!r} has unknown keys {sorted(unknown)}")
            entry_name = _registry_name(str(values["name"]), registry) or match_registry(str(values["path"]), registry)
            base = registry.benchmarks.get(entry_name) if entry_name else None
            spec = _copy(base) if base is not None else BenchmarkSpec(name=str(values["name"]))
            for key, value in values.items():
                setattr(spec, key, list(value) if isinstance(value, list) else value)
            spec.path = str(Path(str(spec.path)).expanduser())
            if spec.path.endswith(".parquet"):
                spec.format = "arpo_rl"
            spec.__post_init__()
            out.setdefault(spec.name, spec)
            continue
        entry = str(raw).strip()
        if not entry:
            continue
        alias = None
        if "=" in entry:
            alias, entry = (part.strip() for part in entry.split("=", 1))
        if entry in registry.groups and alias is None:
            for name in registry.groups[entry]:
                out.setdefault(name, _copy(registry.benchmarks[name]))
            continue
        if entry in registry.benchmarks and alias is None and not _looks_like_path(entry):
            out.setdefault(entry, _copy(registry.benchmarks[entry]))
            continue
        if not _looks_like_path(entry) and not Path(entry).is_file():
            raise BenchmarkError(
                f"unknown benchmark {entry!r}: not in the registry ({', '.join(registry.benchmarks)}), not a group "
                f"({', '.join(registry.groups)}) and not a file"
            )
        path = Path(entry).expanduser()
        stem = path.name.split(".")[0]
        entry_name = (_registry_name(alias, registry) if alias else None) or match_registry(path, registry)
        base = registry.benchmarks.get(entry_name) if entry_name else None
        spec = _copy(base) if base is not None else BenchmarkSpec(name=stem)
        if path.suffix == ".parquet":
            spec.format = "arpo_rl"
        spec.name = alias or (entry_name if base is not None else stem)
        if spec.name in out and out[spec.name].path != str(path) and not alias:
            spec.name = stem  # a second file of the same set keeps its own name
        spec.path = str(path)
        out.setdefault(spec.name, spec)
    if not out:
        raise BenchmarkError("eval_benchmarks is empty: name registry benchmarks, groups or files")
    for spec in out.values():
        resolve_file(spec, data_dir)
    return list(out.values())


def _registry_name(name: str, registry: Registry) -> str | None:
    r"""The registry entry called `name`, or having it as alias (case, `-`, `_` and spaces ignored), or None."""
    key = _key(name)
    for entry, spec in registry.benchmarks.items():
        if _key(entry) == key or key in {_key(a) for a in spec.aliases}:
            return entry
    return None


def _copy(spec: BenchmarkSpec) -> BenchmarkSpec:
    return BenchmarkSpec(**{k: (list(v) if isinstance(v, list) else v) for k, v in spec.__dict__.items()})


def resolve_file(spec: BenchmarkSpec, data_dir: str | None) -> str:
    r"""Set and return `spec.path`: the given path, or the first of `spec.files` that exists in `data_dir`.

    Raises:
        BenchmarkError: nothing found (the message lists the paths tried and the key to set).
    """
    if spec.path is not None:
        if not Path(spec.path).is_file():
            raise BenchmarkError(f"benchmark {spec.name!r}: file {spec.path} does not exist")
        return spec.path
    if not data_dir:
        raise BenchmarkError(
            f"benchmark {spec.name!r} is a registry name but eval_data_dir is not set: point it at the folder with "
            "the benchmark files (e.g. ../shared/data/arpo/eval, or RUC-NLPIR/ARPO's evaluation/data)"
        )
    tried = [Path(data_dir).expanduser() / name for name in spec.files]
    for candidate in tried:
        if candidate.is_file():
            spec.path = str(candidate)
            if candidate.suffix == ".parquet":
                spec.format = "arpo_rl"
            return spec.path
    raise BenchmarkError(f"benchmark {spec.name!r}: none of {[str(t) for t in tried]} exists")


def file_sha256(path: str | os.PathLike) -> str:
    r"""SHA-256 hex digest of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_answers(value: Any, reader: str = "plain", where: str = "answer") -> list[str]:
    r"""Gold answers of one row as a non-empty list of strings.

    `plain`: a string (a JSON or Python list literal such as `'["a", "b"]'` is read as that list), an int or float
    (`70` -> `"70"`, `2.0` -> `"2.0"`), or a list of those (nested lists flattened). `gsm8k`: the value after the last
    `####` of the rationale, commas removed (`"... #### 1,080"` -> `"1080"`).

    Args:
        value: The answer field's value.
        reader: `plain` or `gsm8k`.
        where: Location for error messages (`file:row N field answer`).

    Raises:
        BenchmarkError: missing, empty, of another type, or a GSM8K rationale without `####`.
    """
    from ..rewards import normalize_ground_truths

    if value is None or isinstance(value, bool) or isinstance(value, dict):
        raise BenchmarkError(f"{where}: expected a string, number or list of strings, got {type(value).__name__}")
    if reader == "gsm8k":
        match = _GSM8K_VALUE.search(str(value))
        if match is None:
            raise BenchmarkError(f"{where}: GSM8K answer without '#### <value>'")
        return [match.group(1).replace(",", "").strip()]
    answers = [a.strip() for a in normalize_ground_truths(value) if str(a).strip()]
    if not answers:
        raise BenchmarkError(f"{where}: the answer is empty")
    return answers


def _read_rows(path: str) -> list[dict[str, Any]]:
    text = Path(path).read_text(encoding="utf-8")
    if path.endswith(".json") and text.lstrip().startswith("["):
        rows = json.loads(text)
        if not all(isinstance(r, dict) for r in rows):
            raise BenchmarkError(f"{path}: expected a list of JSON objects")
        return rows
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BenchmarkError(f"{path}:{number}: not valid JSON ({err.msg})") from None
        if not isinstance(row, dict):
            raise BenchmarkError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
    return rows


def is_arpo_rl_row(row: dict[str, Any]) -> bool:
    r"""Whether a row is in ARPO's RL layout: a `prompt` message list and a `reward_model`.

    `llamafactory-agentic task generate` writes `train.jsonl` and `heldout.jsonl` that way.
    """
    return isinstance(row.get("prompt"), (list, str)) and "reward_model" in row


def _load_jsonl(spec: BenchmarkSpec, path: str, rows: list[dict[str, Any]] | None = None) -> list[Sample]:
    samples = []
    for index, row in enumerate(_read_rows(path) if rows is None else rows):
        where = f"{path}: row {index}"
        question = next((row[f] for f in spec.question_fields if isinstance(row.get(f), str) and row[f].strip()), None)
        if question is None:
            raise BenchmarkError(f"{where}: no question in any of the fields {spec.question_fields}")
        if spec.answer_field not in row:
            raise BenchmarkError(f"{where}: field {spec.answer_field!r} is missing")
        answers = read_answers(row[spec.answer_field], spec.answer_reader, f"{where} field {spec.answer_field!r}")
        metadata = {k: v for k, v in row.items() if k not in (*spec.question_fields, spec.answer_field)}
        label = answers[0] if spec.answer_reader == "gsm8k" else row[spec.answer_field]
        samples.append(Sample(spec.name, str(index), question, answers, spec.task, metadata=metadata, label=label))
    return samples


def _load_arpo_rl(spec: BenchmarkSpec, path: str, rows: list[dict[str, Any]] | None = None) -> list[Sample]:
    from ..data.rl_schema import RLRowError, parse_rl_row

    if rows is None:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        else:
            rows = _read_rows(path)
    samples = []
    for index, row in enumerate(rows):
        try:
            parsed = parse_rl_row(row, repair=True)
        except RLRowError as err:
            raise BenchmarkError(f"{path}: row {index}: {err}") from None
        answers = read_answers(parsed.ground_truth, "plain", f"{path}: row {index} field reward_model.ground_truth")
        task = "math" if parsed.ability == "math" else spec.task if spec.task != "math" else "qa"
        question = parsed.messages[-1]["content"]
        metadata = {"data_source": parsed.data_source, "ability": parsed.ability, **parsed.extra}
        samples.append(
            Sample(spec.name, str(index), question, answers, task, parsed.messages, parsed.system or None, metadata,
                   parsed.ground_truth)
        )  # fmt: skip
    return samples


def load_benchmark(spec: BenchmarkSpec, max_samples: int | None = None) -> Benchmark:
    r"""Read every row of a benchmark's file.

    Args:
        spec: A spec with `path` set (`resolve_file`).
        max_samples: Keep only the first N rows (`config.resolve_max_samples`: `eval_max_samples` or the `paper`
            preset's 500; recorded in the results).

    Returns:
        The `Benchmark`; `warnings` holds a row-count mismatch against the registry's `rows`.

    Raises:
        BenchmarkError: unreadable file or malformed row.
    """
    path = spec.path or resolve_file(spec, None)
    if spec.format == "arpo_rl":
        samples = _load_arpo_rl(spec, path)
    else:
        rows = _read_rows(path)
        if rows and is_arpo_rl_row(rows[0]):  # e.g. the demo's heldout.jsonl: read as ARPO RL rows
            spec.format = "arpo_rl"
            samples = _load_arpo_rl(spec, path, rows)
        else:
            samples = _load_jsonl(spec, path, rows)
    if not samples:
        raise BenchmarkError(f"{path}: no rows")
    warnings = []
    if spec.rows is not None and len(samples) != spec.rows:
        warnings.append(f"{spec.name}: {path} has {len(samples)} rows, the reference's file has {spec.rows}")
    rows = len(samples)
    if max_samples is not None and max_samples < len(samples):
        warnings.append(
            f"{spec.name}: evaluating the first {max_samples} of {len(samples)} rows (eval_max_samples; the `paper` "
            "preset's default is the reference's 500, -1 evaluates every row)"
        )
        samples = samples[:max_samples]
    return Benchmark(spec=spec, path=path, sha256=file_sha256(path), samples=samples, warnings=warnings, rows=rows)
