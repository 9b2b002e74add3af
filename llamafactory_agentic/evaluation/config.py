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

r"""Configuration of `llamafactory-agentic eval`: the `eval_*` keys, the protocol presets and the fingerprint.

An evaluation YAML holds LLaMA-Factory's model keys (`model_name_or_path`, `adapter_name_or_path`, `template`,
`infer_backend`, ...), the plugin's tool keys (`agentic_tool_config`, `agentic_cache_path`, `agentic_cache_mode`,
`agentic_search_backend`, ... exactly as in a training recipe, so the same tools and cache serve both) and the
`eval_*` keys below. `eval_preset` chooses the protocol (docs/algorithms.md section 9):

* `paper`: temperature 0.6, top-p 0.95, no top-k, repetition penalty 1.1, at most 4096 new tokens per generation call,
  at most 5 python and 10 search calls per sample counted separately (a short notice past a limit or for a repeated
  search), 1500 s per sample, stop strings `</search>`, `</python>`, `</answer>`, a self-written `<result>` dropped,
  5 runs, prompt + response within the reference servers' 32768-token context.
* `train_val`: what validation during training does: greedy, one run, the training call limit (both tools combined,
  EOS at the limit), the training response budget, stop strings `</search>`, `</python>`; the limits are read from
  the `agentic_config.json` that training saved next to the checkpoint when there is one.

Every `eval_*` key left unset takes the preset's value; a key set in the YAML or on the command line wins. The
effective values form the `Protocol`, whose fingerprint (SHA-256 of its canonical JSON) is saved with the results:
a run only resumes, and `eval compare` only compares, under the same fingerprint.
"""

import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..data.tags import wrap_observation
from ..hparams import JUDGE_RETRIES, JUDGE_TIMEOUT_S, agentic_value
from ..validation import validate_tool_keys


PRESETS = ("paper", "train_val")
# the closing tags stand for the built-in tools: the agent loop stops on the closing tag of every tool of the run's tool
# config instead (`rollout.tool_format`), and keeps `</answer>` (docs/tools.md)
PAPER_STOP_STRINGS = ("</search>", "</python>", "</answer>")
TRAIN_STOP_STRINGS = ("</search>", "</python>")
OBSERVATION_FORMAT = wrap_observation("{output}")  # the training string (docs/algorithms.md section 2)
UNLIMITED_CALLS = 10**6  # "no combined limit": the per-tool limits apply

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant that answers the question step by step and may use two tools: a web search tool "
    "and a Python interpreter. Reason inside <think> </think>. To search, write a query inside <search> </search>; "
    "to run code, write it inside <python> </python>; the tool's output then appears inside <result> </result>. You "
    "may think and call the tools several times. Give the final answer inside <answer> </answer> and write the "
    "exact final answer in LaTeX as \\boxed{...}, for example: <think> reasoning </think> <answer> The final answer "
    "is \\[ \\boxed{42} \\] </answer>."
)


class EvalConfigError(ValueError):
    r"""A bad evaluation configuration; the message names the key and the fix."""


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


@dataclass
class EvalArguments:
    r"""The `eval_*` keys of `llamafactory-agentic eval` (help text on each field)."""

    eval_preset: str = field(
        default="paper",
        metadata=_help(
            "Protocol preset: `paper` (docs/algorithms.md section 9) or `train_val` (training's validation)."
        ),
    )
    eval_benchmarks: str | None = field(
        default=None,
        metadata=_help(
            "Benchmarks: registry names (aime24, math500, hotpotqa, ...), group names (math, knowledge, reasoning, "
            "deep_search), file paths (.jsonl, .json, .parquet), `name=path`, or mappings {name, path, task, metric, "
            "question_fields, answer_field, answer_reader}; a YAML list or a comma-separated string."
        ),
    )
    eval_data_dir: str | None = field(
        default=None,
        metadata=_help(
            "Folder with the benchmark files named in the registry (`<name>.jsonl` or `<name>/test.jsonl`), e.g. "
            "../shared/data/arpo/eval or RUC-NLPIR/ARPO's evaluation/data."
        ),
    )
    eval_registry: str | None = field(
        default=None, metadata=_help("Benchmark registry YAML (default: the shipped evaluation/benchmarks.yaml).")
    )
    eval_output_dir: str | None = field(
        default=None,
        metadata=_help("Where records, metrics.json, summary.md/.csv and report.html go; a run resumes from here."),
    )
    eval_overwrite: bool = field(
        default=False,
        metadata=_help("Start over in an output folder that holds a run with another fingerprint (deletes it)."),
    )
    eval_max_samples: int | None = field(
        default=None,
        metadata=_help(
            "Evaluate only the first N rows of each benchmark (saved with the results; -1 = every row). Default: "
            "the preset's: `paper` 500 (the reference harness's COUNTS=500: GSM8K and MATH are cut to 500), "
            "`train_val` every row."
        ),
    )
    eval_runs: int | None = field(
        default=None, metadata=_help("Independent runs R per question (pass@1 = mean over runs; pass@k for k <= R).")
    )
    eval_batch_size: int = field(
        default=64,
        metadata=_help("Samples in flight at once (generation is batched across samples and runs; tools concurrent)."),
    )
    eval_shard: str | None = field(
        default=None,
        metadata=_help("`i/N`: this process evaluates shard i (0-based) of N; the shards merge in the output folder."),
    )
    eval_seed: int = field(default=0, metadata=_help("Seed of the per-sample sampling seeds."))
    eval_system_prompt: str | None = field(
        default=None,
        metadata=_help(
            "System prompt of jsonl benchmarks: `reference` (the reference harness's prompt of each set: "
            "`code_search`, `code_search_cn` for xbench; the `paper` preset's default), `plugin` (the plugin's tool "
            "prompt; the `train_val` default), literal text, `file:PATH`, `rl:PATH.parquet` (message 0 of an ARPO RL "
            "file: the prompt the ARPO models were trained with) or `none`. `arpo_rl` rows keep their own."
        ),
    )
    eval_temperature: float | None = field(default=None, metadata=_help("Sampling temperature (0 = greedy)."))
    eval_top_p: float | None = field(default=None, metadata=_help("Nucleus mass (1.0 = off)."))
    eval_top_k: int | None = field(default=None, metadata=_help("Top-k filter (0 = off)."))
    eval_repetition_penalty: float | None = field(default=None, metadata=_help("Repetition penalty (1.0 = off)."))
    eval_max_new_tokens: int | None = field(
        default=None, metadata=_help("Most new tokens per generation call (0 = only the response budget).")
    )
    eval_max_prompt_length: int | None = field(
        default=None, metadata=_help("Prompt budget in tokens; longer prompts are cut from the left and counted.")
    )
    eval_max_response_length: int | None = field(
        default=None, metadata=_help("Response budget in tokens (model text and observations).")
    )
    eval_training_config: str | None = field(
        default=None,
        metadata=_help(
            "train_val: where the training's budgets, call limit, reward and python timeout come from: the RL "
            "recipe YAML (`llamafactory-cli train` file, stage arpo or aepo), an agentic_config.json, or a folder "
            "holding one. Default: the agentic_config.json next to the checkpoint; without one the run stops and "
            "asks for this key (no guessed budgets)."
        ),
    )
    eval_max_python_calls: int | None = field(
        default=None, metadata=_help("Python calls per sample; later ones get a short notice (-1 = no limit).")
    )
    eval_max_search_calls: int | None = field(
        default=None, metadata=_help("Search calls per sample; later ones get a short notice (-1 = no limit).")
    )
    eval_max_tool_calls: int | None = field(
        default=None,
        metadata=_help(
            "Calls per sample, both tools combined; the next call ends the trajectory with EOS (-1 = none)."
        ),
    )
    eval_repeat_notice: bool | None = field(
        default=None, metadata=_help("A search repeating an earlier query of the sample gets a notice, not a search.")
    )
    eval_stop_strings: str | None = field(
        default=None, metadata=_help("Comma-separated stop strings sent to the engine.")
    )
    eval_drop_self_results: bool | None = field(
        default=None, metadata=_help("Cut a `<result>` the model writes itself (and the text after it).")
    )
    eval_sample_timeout: float | None = field(
        default=None, metadata=_help("Seconds per sample, checked between rounds (0 = none).")
    )
    eval_base_url: str | None = field(
        default=None,
        metadata=_help(
            "OpenAI-compatible server(s) (`http://host:8000/v1`, a list for several) serving the model: "
            "`/v1/completions` with token-id prompts and stop strings; the tokenizer comes from model_name_or_path."
        ),
    )
    eval_model_name: str | None = field(
        default=None, metadata=_help("Model name the server serves (default: the first of its `/models`).")
    )
    eval_api_key_env: str | None = field(
        default=None, metadata=_help("Environment variable holding the server's API key (never logged).")
    )
    eval_request_timeout: float = field(default=600.0, metadata=_help("Seconds per generation request."))
    eval_api: str = field(
        default="completions",
        metadata=_help(
            "API of eval_base_url: `completions` (`/v1/completions` with token-id prompts: exact contexts) or `chat` "
            "(`/v1/chat/completions`, the tool loop client-side: with inline tags each round continues the assistant "
            "message, `continue_final_message`, as vLLM and SGLang accept; with `agentic_tool_protocol: template` "
            "each turn and observation is a message, which LLaMA-Factory's `llamafactory-cli api` takes too)."
        ),
    )
    eval_response_cache: str | None = field(
        default=None,
        metadata=_help(
            "SQLite file caching the server's replies keyed by the request (seeded or greedy requests only): a rerun "
            "into a new output folder, with a new judge or metric, costs no generation. Default: no cache."
        ),
    )
    eval_request_retries: int = field(
        default=4,
        metadata=_help(
            "Attempts per generation request (HTTP 5xx, 429, network errors, timeouts; exponential backoff from "
            "eval_retry_wait seconds, at most 30 s). A request that still fails makes the sample an error record: "
            "never scored, retried by the next run in the same eval_output_dir."
        ),
    )
    eval_retry_wait: float = field(
        default=1.0, metadata=_help("First backoff wait in seconds of generation and judge retries (doubles).")
    )
    eval_max_error_rate: float = field(
        default=0.0,
        metadata=_help(
            "Largest share of error records (generation or judge errors, never scored) for which `eval` still exits "
            "0; past it the exit code is 3 (default 0.0: any error exits 3)."
        ),
    )
    eval_judge_base_url: str | None = field(
        default=None,
        metadata=_help(
            "OpenAI-compatible chat endpoint of the LLM judge (reference: Qwen2.5-72B-Instruct); unset: no judge."
        ),
    )
    eval_judge_model: str | None = field(default=None, metadata=_help("Judge model name."))
    eval_judge_api_key_env: str | None = field(
        default=None, metadata=_help("Environment variable holding the judge's API key.")
    )
    eval_judge_workers: int = field(default=16, metadata=_help("Concurrent judge requests."))
    eval_judge_timeout: float = field(
        default=JUDGE_TIMEOUT_S, metadata=_help("Seconds per judge request, whole (a trickling server is cut off).")
    )
    eval_judge_retries: int = field(
        default=JUDGE_RETRIES,
        metadata=_help(
            "Attempts per judge request (HTTP 5xx, 429, network; Retry-After honoured within timeout x retries)."
        ),
    )
    eval_judge_cache: str | None = field(
        default=None,
        metadata=_help("SQLite file of judge verdicts (default: judge_cache.sqlite in the output folder)."),
    )
    eval_headline_metric: str | None = field(
        default=None,
        metadata=_help("Override every benchmark's headline: f1, em, judge, math_equiv, reward or accuracy."),
    )
    eval_search_mode: str = field(
        default="snippets",
        metadata=_help(
            "`snippets`: every set searches with snippets, as in RL. `browse`: the sets whose registry entry (or "
            "eval_benchmarks entry) says `search_mode: browse` (GAIA, HLE, xbench, WebWalker) fetch the top pages and "
            "summarise them with the eval_browse_* summariser (the papers' protocol, docs/algorithms.md 9.2)."
        ),
    )
    eval_browse_base_url: str | None = field(
        default=None, metadata=_help("OpenAI-compatible chat endpoint of the browse summariser.")
    )
    eval_browse_model: str | None = field(default=None, metadata=_help("Browse summariser model name."))
    eval_browse_api_key_env: str | None = field(
        default=None, metadata=_help("Environment variable holding the browse summariser's API key.")
    )
    eval_browse_pages: int = field(default=10, metadata=_help("Result pages browsed per search (the paper: 10)."))
    eval_browse_page_chars: int = field(
        default=8000,
        metadata=_help("Characters of page text around the best-matching passage sent to the summariser."),
    )
    eval_browse_summary_chars: int = field(
        default=3000, metadata=_help("Characters kept per page summary in the observation.")
    )
    eval_browse_fetch_timeout: float = field(
        default=20.0, metadata=_help("Seconds per page download, whole (redirects and a trickling server included).")
    )
    eval_browse_allow_hosts: str | None = field(
        default=None,
        metadata=_help(
            "Internal hosts browse may fetch pages from (intranet use), comma-separated: names or addresses as written "
            "in the links (`wiki.corp,10.1.2.3`) or networks (`10.0.0.0/8`). Default none: links and redirects to "
            "loopback, private, link-local (cloud metadata) and reserved addresses are refused after DNS resolution "
            '(docs/tools.md "Outbound limits").'
        ),
    )
    eval_report: bool = field(default=True, metadata=_help("Write report.html."))
    eval_report_max_trajectories: int = field(
        default=5000, metadata=_help("Trajectories embedded in report.html (the report says when it shows fewer).")
    )
    eval_progress: bool = field(default=True, metadata=_help("Show a progress bar."))

    def __post_init__(self) -> None:
        r"""Normalise list-valued keys and check the choices.

        Raises:
            EvalConfigError: naming the bad key.
        """
        if self.eval_preset not in PRESETS:
            raise EvalConfigError(f"eval_preset must be one of {list(PRESETS)}, got {self.eval_preset!r}")
        self.eval_benchmarks = _as_list(self.eval_benchmarks)
        self.eval_base_url = _as_list(self.eval_base_url) or None
        if self.eval_batch_size < 1:
            raise EvalConfigError(f"eval_batch_size must be >= 1, got {self.eval_batch_size}")
        if self.eval_runs is not None and self.eval_runs < 1:
            raise EvalConfigError(f"eval_runs must be >= 1, got {self.eval_runs}")
        if self.eval_max_samples is not None and self.eval_max_samples < 1 and self.eval_max_samples != -1:
            raise EvalConfigError(f"eval_max_samples must be >= 1 (or -1: every row), got {self.eval_max_samples}")
        parse_shard(self.eval_shard)
        if self.eval_api not in ("completions", "chat"):
            raise EvalConfigError(f"eval_api must be completions or chat, got {self.eval_api!r}")
        if self.eval_judge_base_url and not self.eval_judge_model:
            raise EvalConfigError("eval_judge_base_url is set but eval_judge_model is not: name the judge model")
        if self.eval_search_mode not in ("snippets", "browse"):
            raise EvalConfigError(f"eval_search_mode must be snippets or browse, got {self.eval_search_mode!r}")
        if self.eval_browse_allow_hosts is not None:
            from ..common.outbound import AddressPolicy

            try:
                AddressPolicy(self.eval_browse_allow_hosts)
            except ValueError as exc:
                raise EvalConfigError(
                    f"eval_browse_allow_hosts: {exc}; give host names, addresses or networks, comma-separated"
                ) from None
        if self.eval_search_mode == "browse" and not (self.eval_browse_base_url and self.eval_browse_model):
            raise EvalConfigError(
                "eval_search_mode: browse needs a summariser: set eval_browse_base_url (an OpenAI-compatible chat "
                "endpoint) and eval_browse_model"
            )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    if isinstance(value, dict):
        return [dict(value)]
    return [dict(v) if isinstance(v, dict) else str(v).strip() for v in value if isinstance(v, dict) or str(v).strip()]


def parse_shard(value: str | None) -> tuple[int, int]:
    r"""`"i/N"` -> `(i, N)` with 0 <= i < N; None -> `(0, 1)`.

    Raises:
        EvalConfigError: malformed or out of range.
    """
    if value is None or str(value).strip() == "":
        return 0, 1
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(value))
    if not match or not 0 <= int(match.group(1)) < int(match.group(2)):
        raise EvalConfigError(f"eval_shard must be 'i/N' with 0 <= i < N (e.g. 0/4), got {value!r}")
    return int(match.group(1)), int(match.group(2))


@dataclass
class Protocol:
    r"""The effective evaluation protocol (everything that changes what the model is asked and allowed to do).

    Attributes:
        preset: `paper` or `train_val`.
        temperature, top_p, top_k, repetition_penalty: Sampling.
        max_new_tokens: Most new tokens per generation call (None: only the response budget).
        max_prompt_length, max_response_length: Token budgets.
        tool_call_limits: Per-tool call limits (notice past the limit), e.g. `{"python": 5, "search": 10}`.
        max_tool_calls: Combined limit ending the trajectory with EOS (None: none).
        repeat_notice: A repeated search gets a notice.
        stop_strings: Stop strings sent to the engine (besides EOS).
        drop_self_results: A self-written `<result>` is cut.
        sample_timeout_s: Seconds per sample (None: none).
        runs: Runs R per question.
        system_prompt_sha256: SHA-256 of the system prompt of jsonl benchmarks ("" for none).
        observation_format: The inserted observation string.
        seed: Seed of the per-sample seeds.
        reward: `agentic_reward` / `agentic_reward_math` of the reward column.
        tools: Tool settings that change observations (search backend, top-k, snippet size, python limits, tool
            config file hash); cache location and mode are not part of the protocol.
    """

    preset: str
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    max_new_tokens: int | None
    max_prompt_length: int
    max_response_length: int
    tool_call_limits: dict[str, int]
    max_tool_calls: int | None
    repeat_notice: bool
    stop_strings: list[str]
    drop_self_results: bool
    sample_timeout_s: float | None
    runs: int
    system_prompt_sha256: str
    observation_format: str
    seed: int
    reward: dict[str, str]
    tools: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        r"""Plain JSON-serialisable dict."""
        return asdict(self)

    @property
    def fingerprint(self) -> str:
        r"""First 16 hex digits of the SHA-256 of the canonical JSON of `to_dict()`."""
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


PAPER_MAX_SAMPLES = 500  # the reference harness's COUNTS (infer_local_sds.sh): every set is cut to its first 500 rows

# train_val: the tool and reward keys taken from the training (docs/algorithms.md section 9, evaluation/README.md)
TRAINING_TOOL_KEYS = (
    "agentic_reward",
    "agentic_reward_math",
    "agentic_reward_tool_bonus",
    "agentic_python_timeout",
    "agentic_python_max_output_chars",
    "agentic_search_topk",
    "agentic_search_snippet_chars",
    "agentic_tool_protocol",
    "agentic_tool_config",
)
# train_val: the eval_* keys that repeat a training key; eval_max_new_tokens has no training key (the training's
# rollout has no per-call limit: only the response budget), see `apply_training_config`
TRAINING_EVAL_KEYS = {
    "eval_max_prompt_length": "arpo_max_prompt_length",
    "eval_max_response_length": "arpo_max_response_length",
    "eval_max_tool_calls": "agentic_max_tool_calls",
}
SOURCE_CLI, SOURCE_FILE, SOURCE_CHECKPOINT, SOURCE_DEFAULT = "command line", "config file", "checkpoint", "default"


def resolve_max_samples(eval_args: "EvalArguments") -> int | None:
    r"""Rows evaluated per benchmark (None: every row).

    `eval_max_samples` (-1: every row), else the preset's: `paper` 500 (the reference's cap), `train_val` every row.
    """
    value = eval_args.eval_max_samples
    if value is None:
        return PAPER_MAX_SAMPLES if eval_args.eval_preset == "paper" else None
    return None if value == -1 else int(value)


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) != float(b)
    return a != b


def apply_training_config(
    eval_args: "EvalArguments", finetuning_args: Any, model_args: Any, given: dict[str, str] | None = None
) -> dict[str, Any]:
    r"""`train_val`: put the training's budgets, call limit, tool and reward keys in place, in this precedence.

    command line (`key=value` after the YAML) > the checkpoint's `agentic_config.json` (or `eval_training_config`)
    > the evaluation's config file > the preset's default. The checkpoint wins over the config file because one
    evaluation YAML usually serves several presets (LLaMA-Board's panel, evaluation/examples); every config-file
    value that the checkpoint overrides, and every command-line value that differs from the checkpoint's, is
    returned in `conflicts` (logged, saved in run.json and summary.md). `eval_max_new_tokens` from the config file is
    dropped too (the training's rollout has no per-call limit, only the response budget).

    Args:
        eval_args: The `eval_*` keys; changed in place.
        finetuning_args: The plugin's tool keys; changed in place.
        model_args: LLaMA-Factory `ModelArguments` (where the checkpoint's `agentic_config.json` is looked for).
        given: `{key: "command line" | "config file"}` of the keys the user set (None: every set `eval_*` key
            counts as the config file's).

    Returns:
        `{"source": the training config's path ("" without one), "applied": {key: value}, "conflicts": [text],
        "not_recorded": [training keys the file does not hold]}`.
    """
    if given is None:
        given = {f.name: SOURCE_FILE for f in fields(eval_args) if getattr(eval_args, f.name) != f.default}
    given = dict(given)
    values, source = training_config_for(eval_args, model_args)
    out: dict[str, Any] = {"source": source, "applied": {}, "conflicts": [], "not_recorded": []}
    if not values:
        return out
    where = f"the checkpoint's {source}" if not eval_args.eval_training_config else f"eval_training_config {source}"

    def take(key: str, train_key: str, value: Any, current: Any, setter: Any, described: str = "") -> None:
        origin, described = given.get(key), described or f"{train_key}={value!r}"
        if origin == SOURCE_CLI:
            if _differs(current, value):
                out["conflicts"].append(f"{key}={current!r} (command line) overrides {described} of {where}")
            return
        if origin == SOURCE_FILE and _differs(current, value):
            out["conflicts"].append(
                f"{key}={current!r} in the config file is not used: train_val takes {described} from {where} (set "
                f"{key} on the command line to override it)"
            )
        setter(value)
        out["applied"][key] = value

    for key, train_key in TRAINING_EVAL_KEYS.items():
        if values.get(train_key) is None:
            out["not_recorded"].append(train_key)
            continue
        take(key, train_key, values[train_key], getattr(eval_args, key), lambda v, k=key: setattr(eval_args, k, v))
    per_call = eval_args.eval_max_new_tokens
    take("eval_max_new_tokens", "", 0, 0 if per_call is None else per_call,
         lambda v: setattr(eval_args, "eval_max_new_tokens", v),
         "no per-call token limit (the training's rollout has only the response budget)")  # fmt: skip
    for key in TRAINING_TOOL_KEYS:
        if key not in values:
            out["not_recorded"].append(key)
            continue
        value = values[key]
        if key == "agentic_tool_config" and value and not os.path.isfile(os.path.expanduser(str(value))):
            out["conflicts"].append(
                f"agentic_tool_config {value!r} of {where} does not exist here: the evaluation's "
                f"{getattr(finetuning_args, key, None)!r} is used"
            )
            continue
        take(key, key, value, getattr(finetuning_args, key, None), lambda v, k=key: setattr(finetuning_args, k, v))
    if out["not_recorded"]:
        out["conflicts"].append(
            f"{where} does not record {', '.join(out['not_recorded'])} (saved by an older release): the config file's "
            "or the default values are used; set them to the training's values to repeat its validation"
        )
    return out


# Protocol field -> the key that sets it (for `protocol_sources`)
PROTOCOL_KEYS = {
    "temperature": "eval_temperature",
    "top_p": "eval_top_p",
    "top_k": "eval_top_k",
    "repetition_penalty": "eval_repetition_penalty",
    "max_new_tokens": "eval_max_new_tokens",
    "max_prompt_length": "eval_max_prompt_length",
    "max_response_length": "eval_max_response_length",
    "tool_call_limits.python": "eval_max_python_calls",
    "tool_call_limits.search": "eval_max_search_calls",
    "max_tool_calls": "eval_max_tool_calls",
    "repeat_notice": "eval_repeat_notice",
    "stop_strings": "eval_stop_strings",
    "drop_self_results": "eval_drop_self_results",
    "sample_timeout_s": "eval_sample_timeout",
    "runs": "eval_runs",
    "system_prompt_sha256": "eval_system_prompt",
    "seed": "eval_seed",
    "max_samples": "eval_max_samples",
    "reward.agentic_reward": "agentic_reward",
    "reward.agentic_reward_math": "agentic_reward_math",
    "tools.search_backend": "agentic_search_backend",
    "tools.search_topk": "agentic_search_topk",
    "tools.search_snippet_chars": "agentic_search_snippet_chars",
    "tools.python_timeout": "agentic_python_timeout",
    "tools.python_max_output_chars": "agentic_python_max_output_chars",
    "tools.tool_config_sha256": "agentic_tool_config",
    "tools.tool_protocol": "agentic_tool_protocol",
}


def protocol_sources(
    eval_args: "EvalArguments", given: dict[str, str] | None = None, training: dict[str, Any] | None = None
) -> dict[str, str]:
    r"""Where each protocol value came from: `command line`, `config file`, `checkpoint` or `default`.

    Args:
        eval_args: The `eval_*` keys.
        given: `{key: "command line" | "config file"}` of the keys the user set.
        training: What `apply_training_config` returned (`train_val`), else None.

    Returns:
        `{protocol field: source}` for the fields of `PROTOCOL_KEYS` (`tools.*` and `reward.*` by their key;
        `default` is the preset's value for `eval_*` keys and the declared default for the `agentic_*` keys).
    """
    given = dict(given or {})
    applied = (training or {}).get("applied") or {}
    out = {}
    for name, key in PROTOCOL_KEYS.items():
        if key in applied and given.get(key) != SOURCE_CLI:
            out[name] = SOURCE_CHECKPOINT
        elif key in given:
            out[name] = given[key]
        elif key.startswith("eval_"):
            out[name] = f"{SOURCE_DEFAULT} (preset {eval_args.eval_preset})"
        else:
            out[name] = SOURCE_DEFAULT
    return out


def training_values(source: str) -> dict[str, Any]:
    r"""The effective training values of `eval_training_config`.

    Args:
        source: A recipe YAML (its keys over the plugin's declared defaults, then the stage preset filled in as
            training does, `train.presets.resolve_presets`), an `agentic_config.json`, or a folder holding one.

    Returns:
        `{key: value}` of the plugin's keys (`arpo_max_prompt_length`, `agentic_max_tool_calls`, ...).

    Raises:
        EvalConfigError: a missing or unreadable file, or a recipe whose stage is not `arpo` / `aepo`.
    """
    path = Path(str(source)).expanduser()
    if path.is_dir():
        path = path / "agentic_config.json"
    if not path.is_file():
        raise EvalConfigError(f"eval_training_config: {path} does not exist")
    if path.suffix == ".json":
        try:
            return saved_values(json.loads(path.read_text(encoding="utf-8")))
        except (json.JSONDecodeError, AttributeError, TypeError) as err:
            raise EvalConfigError(f"eval_training_config: {path} is not an agentic_config.json: {err}") from None
    import yaml

    try:
        recipe = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as err:
        raise EvalConfigError(f"eval_training_config: {path} is not valid YAML: {err}") from None
    stage = recipe.get("stage")
    if stage not in ("arpo", "aepo"):
        raise EvalConfigError(
            f"eval_training_config: {path} is a stage {stage!r} recipe; train_val takes the RL recipe's budgets "
            "(stage arpo or aepo), e.g. the recipe the ARPO checkpoint you compare against was trained with"
        )
    from types import SimpleNamespace

    from ..hparams import AgenticArguments
    from ..train.presets import resolve_presets

    args = SimpleNamespace(**{f.name: f.default for f in fields(AgenticArguments)})
    for key, value in recipe.items():
        setattr(args, key, value)
    try:
        resolved = resolve_presets(args, verbose=False)
    except ValueError as err:
        raise EvalConfigError(f"eval_training_config: {path}: {err}") from None
    return {**{k: getattr(args, k) for k in vars(args) if k.startswith(("agentic_", "arpo_", "aepo_"))},
            **resolved["values"]}  # fmt: skip


def saved_values(saved: dict[str, Any]) -> dict[str, Any]:
    r"""The keys of a parsed `agentic_config.json`: every recorded key (`keys`) under the effective `values`."""
    return {**dict(saved.get("keys") or {}), **dict(saved.get("values") or {})}


def agentic_config_file(path: str | None) -> Path | None:
    r"""The `agentic_config.json` of a checkpoint folder: in it, or for a `checkpoint-N` folder in its parent."""
    if not path:
        return None
    folder = Path(str(path).split(",")[0]).expanduser()
    for candidate in (folder, folder.parent if re.fullmatch(r"checkpoint-\d+", folder.name) else None):
        if candidate is not None and (candidate / "agentic_config.json").is_file():
            return candidate / "agentic_config.json"
    return None


def training_config_for(eval_args: "EvalArguments", model_args: Any) -> tuple[dict[str, Any], str]:
    r"""The values of the training that the `train_val` preset repeats, and where they came from.

    Returns:
        `(values, source)`: from `eval_training_config`, else the checkpoint's (or adapter's) `agentic_config.json`
        (for a `checkpoint-N` folder, the one in the run's output folder above it); `({}, "")` when there is neither.
    """
    if eval_args.eval_training_config:
        return training_values(eval_args.eval_training_config), str(eval_args.eval_training_config)
    adapters = getattr(model_args, "adapter_name_or_path", None)
    for path in (adapters and ",".join(adapters), getattr(model_args, "model_name_or_path", None)):
        values = read_training_config(path)
        if values:
            return values, str(agentic_config_file(path))
    return {}, ""


def read_training_config(*paths: str | None) -> dict[str, Any]:
    r"""Keys training saved (`agentic_config.json` of the checkpoint or adapter, `saved_values`), else `{}`."""
    for path in paths:
        candidate = agentic_config_file(path)
        if candidate is not None:
            try:
                return saved_values(json.loads(candidate.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, AttributeError, TypeError) as err:
                raise EvalConfigError(f"{candidate} is not a valid agentic_config.json: {err}") from None
    return {}


def system_prompt_setting(eval_args: "EvalArguments") -> str | None:
    r"""`eval_system_prompt`, or the preset's default: `reference` under `paper`, the plugin's prompt under `train_val`."""
    if eval_args.eval_system_prompt is not None:
        return eval_args.eval_system_prompt
    return "reference" if eval_args.eval_preset == "paper" else None


def resolve_system_prompt(value: str | None, prompt_type: str = "code_search") -> str | None:
    r"""The system prompt of jsonl benchmarks from `eval_system_prompt` (see its help); None means no system prompt.

    Args:
        value: The setting (None: the plugin's tool prompt).
        prompt_type: For `reference`: the set's reference prompt (`BenchmarkSpec.prompt`: `code_search` or
            `code_search_cn`).

    Raises:
        EvalConfigError: a missing file, or an RL file without a system message.
    """
    from .reference import REFERENCE_PROMPTS

    if value is None:
        return DEFAULT_SYSTEM_PROMPT
    text = str(value)
    if text.strip().lower() in ("none", ""):
        return None
    if text.strip().lower() == "plugin":
        return DEFAULT_SYSTEM_PROMPT
    if text.strip().lower() == "reference":
        return REFERENCE_PROMPTS[prompt_type]
    if text.startswith("file:"):
        path = Path(text[5:]).expanduser()
        if not path.is_file():
            raise EvalConfigError(f"eval_system_prompt: file {path} does not exist")
        return path.read_text(encoding="utf-8").strip()
    if text.startswith("rl:"):
        import pyarrow.parquet as pq

        from ..data.rl_schema import parse_rl_row

        path = Path(text[3:]).expanduser()
        if not path.is_file():
            raise EvalConfigError(f"eval_system_prompt: RL file {path} does not exist")
        rows = pq.read_table(path).slice(0, 1).to_pylist()
        system = parse_rl_row(rows[0], repair=True).system if rows else ""
        if not system:
            raise EvalConfigError(f"eval_system_prompt: the first row of {path} has no system message")
        return system
    return text


def _limit(value: int | None) -> int | None:
    return None if value is None or int(value) < 0 else int(value)


def resolve_protocol(eval_args: EvalArguments, finetuning_args: Any, model_args: Any = None) -> Protocol:
    r"""Effective protocol: explicit `eval_*` keys, then the preset (and for `train_val` the training config).

    Args:
        eval_args: The `eval_*` keys.
        finetuning_args: Object with the plugin's `agentic_*` / `arpo_*` keys (tool settings, reward, training limits).
        model_args: LLaMA-Factory `ModelArguments` (for `train_val`: the checkpoint's `agentic_config.json`).

    Returns:
        The `Protocol`.

    Raises:
        EvalConfigError: a value out of range.
    """
    a = eval_args

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    if a.eval_preset == "paper":
        base = dict(
            temperature=0.6,
            top_p=0.95,
            top_k=0,
            repetition_penalty=1.1,
            max_new_tokens=4096,
            max_prompt_length=4096,
            max_response_length=32768 - 4096,
            python=5,
            search=10,
            max_tool_calls=None,
            repeat_notice=True,
            stop=list(PAPER_STOP_STRINGS),
            drop=True,
            timeout=1500.0,
            runs=5,
        )
    else:
        saved, _ = training_config_for(a, model_args)
        needed = {"arpo_max_prompt_length": a.eval_max_prompt_length,
                  "arpo_max_response_length": a.eval_max_response_length,
                  "agentic_max_tool_calls": a.eval_max_tool_calls}  # fmt: skip
        unknown = [key for key, explicit in needed.items() if explicit is None and saved.get(key) is None]
        if unknown:
            where = getattr(model_args, "adapter_name_or_path", None) or getattr(model_args, "model_name_or_path", "")
            raise EvalConfigError(
                f"eval_preset train_val repeats the training's validation, but {where} has no agentic_config.json "
                f"(an SFT checkpoint, for instance), so {unknown} are unknown. Set eval_training_config to the RL "
                "recipe YAML (or an agentic_config.json) of the training to compare with, or set "
                "eval_max_prompt_length, eval_max_response_length and eval_max_tool_calls."
            )
        base = dict(
            temperature=0.0,
            top_p=1.0,
            top_k=0,
            repetition_penalty=1.0,
            max_new_tokens=None,
            max_prompt_length=int(saved.get("arpo_max_prompt_length") or 0),
            max_response_length=int(saved.get("arpo_max_response_length") or 0),
            python=None,
            search=None,
            max_tool_calls=saved.get("agentic_max_tool_calls"),
            repeat_notice=False,
            stop=list(TRAIN_STOP_STRINGS),
            drop=False,
            timeout=None,
            runs=1,
        )
    limits = {}
    for tool, key in (("python", a.eval_max_python_calls), ("search", a.eval_max_search_calls)):
        value = _limit(pick(key, base[tool]))
        if value is not None:
            limits[tool] = value
    max_new = pick(a.eval_max_new_tokens, base["max_new_tokens"])
    timeout = pick(a.eval_sample_timeout, base["timeout"])
    stop = _as_list(a.eval_stop_strings) if a.eval_stop_strings is not None else base["stop"]
    setting = system_prompt_setting(a)
    if str(setting).strip().lower() == "reference":
        from .reference import REFERENCE_PROMPTS

        system_prompt = "reference:" + json.dumps(REFERENCE_PROMPTS, sort_keys=True, ensure_ascii=False)
    else:
        system_prompt = resolve_system_prompt(setting)
    try:  # the one validator of the tool keys (the parser's and the executor's): same checks, same messages
        tool_keys = validate_tool_keys(finetuning_args)
    except ValueError as err:
        raise EvalConfigError(str(err)) from None
    tool_config = tool_keys["tool_config"]
    if a.eval_stop_strings is None:  # record what the rollout sends the engine with the run's tools (run.json)
        stop = _rollout_stops(stop, tool_config, agentic_value(finetuning_args, "agentic_tool_protocol"))
    protocol = Protocol(
        preset=a.eval_preset,
        temperature=float(pick(a.eval_temperature, base["temperature"])),
        top_p=float(pick(a.eval_top_p, base["top_p"])),
        top_k=int(pick(a.eval_top_k, base["top_k"])),
        repetition_penalty=float(pick(a.eval_repetition_penalty, base["repetition_penalty"])),
        max_new_tokens=None if not max_new else int(max_new),
        max_prompt_length=int(pick(a.eval_max_prompt_length, base["max_prompt_length"])),
        max_response_length=int(pick(a.eval_max_response_length, base["max_response_length"])),
        tool_call_limits=limits,
        max_tool_calls=_limit(pick(a.eval_max_tool_calls, base["max_tool_calls"])),
        repeat_notice=bool(pick(a.eval_repeat_notice, base["repeat_notice"])),
        stop_strings=list(stop),
        drop_self_results=bool(pick(a.eval_drop_self_results, base["drop"])),
        sample_timeout_s=None if not timeout else float(timeout),
        runs=int(pick(a.eval_runs, base["runs"])),
        system_prompt_sha256=hashlib.sha256((system_prompt or "").encode("utf-8")).hexdigest()
        if system_prompt
        else "",
        observation_format=OBSERVATION_FORMAT,
        seed=int(a.eval_seed),
        reward={
            "agentic_reward": str(agentic_value(finetuning_args, "agentic_reward")),
            "agentic_reward_math": str(agentic_value(finetuning_args, "agentic_reward_math")),
        },
        tools={
            **{
                name: tool_keys[name]
                for name in (
                    "search_backend",
                    "search_topk",
                    "search_snippet_chars",
                    "python_timeout",
                    "python_max_output_chars",
                )
            },
            "tool_config_sha256": _file_sha(tool_config),
            # only when they change observations, so that the fingerprints of earlier runs stay valid
            **(
                {
                    "search_mode": "browse",
                    "browse_model": a.eval_browse_model,
                    "browse_pages": a.eval_browse_pages,
                    "browse_page_chars": a.eval_browse_page_chars,
                    "browse_summary_chars": a.eval_browse_summary_chars,
                }
                if a.eval_search_mode == "browse"
                else {}
            ),
            **(
                {"contamination_mode": agentic_value(finetuning_args, "agentic_contamination_mode")}
                if agentic_value(finetuning_args, "agentic_contamination_mode") != "log"
                else {}
            ),
            # the tool-call format changes what the model reads and writes (inline tags or the template's turns)
            **(
                {"tool_protocol": agentic_value(finetuning_args, "agentic_tool_protocol")}
                if agentic_value(finetuning_args, "agentic_tool_protocol") != "inline_tags"
                else {}
            ),
        },
    )
    _check_protocol(protocol)
    return protocol


def _rollout_stops(stops: list[str], tool_config: str | None, tool_protocol: str | None) -> list[str]:
    r"""The stop strings the rollout will send the engine (`rollout.agent_loop.rollout_stop_strings`).

    The preset's `</search>`, `</python>` stand for the default tools: with a tool config, the closing tags of its
    tools replace them (a run of a `<convert>` tool stops on `</convert>`; `run.json` recorded `</search>`,
    `</python>`, issue 35); with `agentic_tool_protocol: template` no tag closes a call.

    Raises:
        EvalConfigError: the tool config cannot be read or names a tool that cannot be imported.
    """
    from ..rollout.agent_loop import rollout_stop_strings
    from ..rollout.tool_format import tool_stop_strings

    if tool_protocol == "template":
        return list(rollout_stop_strings(stops, ()))
    if not tool_config:
        return list(stops)
    from ..tools.registry import load_tool_config, resolve_tool_class

    try:
        specs = load_tool_config(tool_config).tools
        tags = [spec.tag or resolve_tool_class(spec.name).default_tag for spec in specs]
    except (OSError, ValueError, KeyError) as err:
        raise EvalConfigError(f"agentic_tool_config {tool_config}: {err}") from None
    return list(rollout_stop_strings(stops, tool_stop_strings(tags)))


def _file_sha(path: str | None) -> str:
    if not path or not os.path.isfile(os.path.expanduser(path)):
        return ""
    with open(os.path.expanduser(path), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _check_protocol(p: Protocol) -> None:
    if p.temperature < 0:
        raise EvalConfigError(f"eval_temperature must be >= 0, got {p.temperature}")
    if not 0 < p.top_p <= 1:
        raise EvalConfigError(f"eval_top_p must be in (0, 1], got {p.top_p}")
    if p.repetition_penalty <= 0:
        raise EvalConfigError(f"eval_repetition_penalty must be > 0, got {p.repetition_penalty}")
    if p.max_prompt_length < 1 or p.max_response_length < 1:
        raise EvalConfigError("eval_max_prompt_length and eval_max_response_length must be >= 1")
    if p.runs < 1:
        raise EvalConfigError(f"eval_runs must be >= 1, got {p.runs}")


def eval_field_names() -> list[str]:
    r"""Names of every `eval_*` key."""
    return [f.name for f in fields(EvalArguments)]


def format_help() -> str:
    r"""The `eval_*` keys with their defaults and help text (printed by `llamafactory-agentic eval -h`)."""
    lines = []
    for f in fields(EvalArguments):
        default = f.default if f.default is not None else "(preset)" if f.name not in _NO_PRESET else "None"
        lines.append(f"  {f.name} (default {default}): {f.metadata.get('help', '')}")
    return "\n".join(lines)


_NO_PRESET = {
    "eval_response_cache",
    "eval_training_config",
    "eval_benchmarks",
    "eval_data_dir",
    "eval_registry",
    "eval_output_dir",
    "eval_shard",
    "eval_system_prompt",
    "eval_base_url",
    "eval_model_name",
    "eval_api_key_env",
    "eval_judge_base_url",
    "eval_judge_model",
    "eval_judge_api_key_env",
    "eval_judge_cache",
    "eval_headline_metric",
    "eval_browse_base_url",
    "eval_browse_model",
    "eval_browse_api_key_env",
    "eval_browse_allow_hosts",
}
