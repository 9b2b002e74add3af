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

r"""`evaluate(config) -> metrics`: the evaluation harness end to end (docs/algorithms.md section 9).

1. Parse the YAML (LLaMA-Factory's model keys through its own parser, the plugin's `agentic_*` tool keys, the
   `eval_*` keys) and resolve the protocol preset; load the benchmarks.
2. Open the output folder (`records.open_run`): a new run, or a resume of the same run.
3. Generate the missing (benchmark, sample, run) records of this shard through the training rollout's agent loop
   (`AgenticRollout.stream`) with the `hf` or `vllm` engine in-process, or an OpenAI-compatible endpoint, and the
   training tool executor and cache; each record is appended the moment its trajectory ends.
4. When every shard's records are there: judge (cached), aggregate, write `metrics.json`, `summary.md`,
   `summary.csv`, `scored.jsonl` and `report.html`.
"""

import fcntl
import hashlib
import json
import os
import platform
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

from ..common.log import get_logger
from ..common.switch import DISABLE_ENV, is_disabled
from ..hparams import agentic_value
from .benchmarks import Benchmark, Sample, load_benchmark, load_registry, resolve_benchmarks
from .config import (
    SOURCE_CLI,
    SOURCE_FILE,
    UNLIMITED_CALLS,
    EvalArguments,
    EvalConfigError,
    Protocol,
    apply_training_config,
    eval_field_names,
    parse_shard,
    protocol_sources,
    resolve_max_samples,
    resolve_protocol,
    resolve_system_prompt,
    system_prompt_setting,
)
from .records import RecordWriter, is_error, load_all_records, open_run, record_key
from .scoring import extract_prediction, headline, rule_equivalent, rule_scores


logger = get_logger(__name__)
LOG_PREFIX = "[agentic-eval]"
SELF_RESULT_STOP = "<result>"


@dataclass
class EvalSetup:
    r"""Parsed configuration.

    LLaMA-Factory's model, data and finetuning arguments (with the plugin's keys), the `eval_*` keys, the raw dict
    and `given`: `{key: "command line" | "config file"}` of every key the user set (`protocol_sources`).
    """

    model_args: Any
    data_args: Any
    finetuning_args: Any
    eval_args: EvalArguments
    raw: dict[str, Any]
    given: dict[str, str] = field(default_factory=dict)


def load_config_dict(config: str | os.PathLike | dict[str, Any], overrides: list[str] | dict | None = None) -> dict:
    r"""The configuration as a dict: a YAML/JSON file or a dict, merged with `key=value` overrides.

    OmegaConf reads and merges them, as `llamafactory-cli` reads its own YAML files.

    Raises:
        FileNotFoundError: the file does not exist.
    """
    from omegaconf import OmegaConf

    if isinstance(config, dict):
        base = OmegaConf.create(config)
    else:
        path = Path(config)
        if not path.is_file():
            raise FileNotFoundError(f"evaluation config {path} does not exist")
        base = OmegaConf.load(path.absolute())
    if overrides:
        extra = OmegaConf.from_cli(list(overrides)) if isinstance(overrides, list) else OmegaConf.create(overrides)
        base = OmegaConf.merge(base, extra)
    return OmegaConf.to_container(base, resolve=True)


def parse_eval_config(
    config: str | os.PathLike | dict[str, Any], overrides: list[str] | dict | None = None
) -> EvalSetup:
    r"""Split and parse an evaluation configuration.

    The `eval_*` keys build `EvalArguments`; everything else goes through LLaMA-Factory's `get_infer_args` (model
    and data keys, and the plugin's `agentic_*`/`arpo_*` keys, which the activated plugin adds to its parser).
    LLaMA-Factory's generation keys (`temperature`, `top_p`, ...) are refused with the `eval_*` key to use instead.

    Raises:
        EvalConfigError: unknown `eval_*` key, a generation key, or the plugin disabled.
        ValueError: from LLaMA-Factory's parser (unknown key, bad value).
    """
    raw = load_config_dict(config, overrides)
    cli = set(load_config_dict({}, overrides)) if overrides else set()
    given = {key: SOURCE_CLI if key in cli else SOURCE_FILE for key, value in raw.items() if value is not None}
    known = set(eval_field_names())
    eval_keys = {k: v for k, v in raw.items() if k.startswith("eval_")}
    unknown = sorted(set(eval_keys) - known)
    if unknown:
        raise EvalConfigError(f"unknown evaluation keys {unknown}; known: {sorted(known)}")
    generation = {"do_sample", "temperature", "top_p", "top_k", "num_beams", "max_length", "max_new_tokens",
                  "repetition_penalty", "length_penalty"}  # fmt: skip
    clash = sorted(generation & set(raw))
    if clash:
        raise EvalConfigError(
            f"{clash}: generation keys of the evaluation are eval_* keys (eval_temperature, eval_top_p, eval_top_k, "
            "eval_repetition_penalty, eval_max_new_tokens); the preset gives their defaults"
        )
    if is_disabled():  # the plugin's keys are in LLaMA-Factory's parser once it is active (hook or `register()`)
        raise EvalConfigError(f"llamafactory-agentic is disabled by {DISABLE_ENV}; unset it to evaluate.")
    from llamafactory.hparams import get_infer_args

    rest = {k: v for k, v in raw.items() if not k.startswith("eval_")}
    if str(rest.get("infer_backend", "")).lower() == "vllm" and not _vllm_installed():
        raise EvalConfigError(VLLM_HINT)
    with _plugin_vllm_range():
        model_args, data_args, finetuning_args, _ = get_infer_args(rest)
    return EvalSetup(model_args, data_args, finetuning_args, EvalArguments(**eval_keys), raw, given)


VLLM_HINT = (
    "infer_backend: vllm needs vLLM, which is not installed: `pip install -c constraints.txt llamafactory-agentic[vllm]` "
    "(vLLM 0.22.1); or use infer_backend: huggingface; or serve the model with `vllm serve` and set eval_base_url"
)


def _vllm_installed() -> bool:
    r"""Whether vLLM is importable or has an installed distribution (whose version LLaMA-Factory's check then reads)."""
    import importlib.metadata
    import importlib.util
    import sys

    if "vllm" in sys.modules:
        return True
    try:
        importlib.metadata.distribution("vllm")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def apply_training_tools(setup: EvalSetup) -> dict[str, Any]:
    r"""`train_val`: the training's budgets, call limit, tool and reward keys, in `apply_training_config`'s precedence.

    Changes `setup.eval_args` and `setup.finetuning_args` in place; logs what was taken and every conflict.

    Returns:
        What `config.apply_training_config` returned (`source`, `applied`, `conflicts`, `not_recorded`).
    """
    taken = apply_training_config(setup.eval_args, setup.finetuning_args, setup.model_args, setup.given)
    if taken["applied"]:
        logger.info(f"{LOG_PREFIX} train_val: from the training ({taken['source']}): {taken['applied']}")
    for conflict in taken["conflicts"]:
        logger.warning(f"{LOG_PREFIX} train_val: {conflict}")
    return taken


# setup.py's `vllm` extra: the releases that install beside torch 2.11.0 and transformers 5.6.0 (docs/install.md "Install")
VLLM_REQUIREMENT = "vllm>=0.22.1,<=0.23.0"


@contextmanager
def _plugin_vllm_range():
    r"""While parsing, LLaMA-Factory's `infer_backend: vllm` check asks for the plugin's vLLM range instead of its own.

    LLaMA-Factory 0.9.5 requires `vllm>=0.4.3,<=0.11.0` for `infer_backend: vllm`; those releases pin torch 2.8, and
    no vLLM release of that range installs beside the pinned torch 2.11.0, so the check would refuse every vLLM that
    can be installed. The mandatory "is vllm installed" check and every other check stay as they are.
    """
    import llamafactory.hparams.parser as lf_parser

    original = lf_parser.check_version

    def check_version(requirement: str, mandatory: bool = False) -> None:
        if requirement.replace(" ", "").startswith("vllm>="):
            requirement = VLLM_REQUIREMENT
        return original(requirement, mandatory)

    lf_parser.check_version = check_version
    try:
        yield
    finally:
        lf_parser.check_version = original


def _versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("llamafactory-agentic", "llamafactory", "transformers", "torch", "vllm", "math-verify"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _backend(setup: EvalSetup, engine: Any) -> str:
    if engine is not None:
        return f"custom:{type(engine).__name__}"
    if setup.eval_args.eval_base_url:
        return "endpoint"
    value = getattr(setup.model_args.infer_backend, "value", setup.model_args.infer_backend)
    return {"huggingface": "hf"}.get(str(value), str(value))


def _item_seed(seed: int, key: str) -> int:
    return int(hashlib.sha256(f"{seed}/{key}".encode()).hexdigest()[:8], 16)


@contextmanager
def _file_lock(path: Path, blocking: bool):
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------- generation
def _prompt_ids(sample: Sample, system: str | None, template: Any, tokenizer: Any) -> list[int]:
    r"""Prompt ids exactly as training renders RL prompts (`data.encode_rl_prompts`)."""
    messages = list(sample.messages or [{"role": "user", "content": sample.question}])
    messages.append({"role": "assistant", "content": ""})
    prompt_ids, _ = template.encode_oneturn(tokenizer, messages, sample.system or system, None)
    return list(prompt_ids)


def _segments(tokenizer: Any, ids: list[int], mask: list[int]) -> list[list[str]]:
    r"""`[["model" | "obs", text], ...]`: the response decoded run by run of equal loss mask."""
    out, index = [], 0
    for trained, run in groupby(mask, key=lambda m: m != 0):
        length = len(list(run))
        text = tokenizer.decode(ids[index : index + length], skip_special_tokens=False)
        out.append(["model" if trained else "obs", text])
        index += length
    return out


def _call_key(tool: str, content: str) -> str:
    from ..tools import normalize_search_query

    return normalize_search_query(content) if tool == "search" else content.strip()


def build_record(
    sample: Sample,
    run: int,
    traj: Any,
    tokenizer: Any,
    reward_fn: Any,
    latency_s: float,
    prompt_tokens: int,
    prompt_truncated: bool,
) -> dict[str, Any]:
    r"""The JSON record of one finished trajectory, with its rule-based scores.

    Args:
        sample: The question.
        run: Run index.
        traj: The finished `rollout.Trajectory`.
        tokenizer: The model's tokenizer.
        reward_fn: The training reward (`rewards.get_reward_function`).
        latency_s: Seconds from the sample entering generation to its end.
        prompt_tokens: Prompt length in tokens (after truncation).
        prompt_truncated: Whether the prompt was cut to the budget.

    Returns:
        A dict: identity, question and answers, prediction, finish reason, response segments, tool calls (with
        status, cache hit, latency), counts, tokens, latency, `answer_leak` (an observation holds a reference
        answer, normalised as the reward does: `rewards.contamination.answer_leaks`) and `scores` (`em`, `f1`,
        `math_equiv`, `reward`, `reward_correctness`, `format_ok`).
    """
    from ..rewards import build_item, build_model_view, score_batch
    from ..rewards.contamination import answer_leaks

    ids, mask = list(traj.response_ids), list(traj.loss_mask)
    view = build_model_view(tokenizer, ids, mask, tokenizer.eos_token_id)
    prediction = extract_prediction(view)
    scores: dict[str, Any] = rule_scores(prediction, sample.answers, sample.task)
    ability = "math" if sample.task == "math" else sample.task
    # the training reward with the same metadata (`executed_tools` included) and trajectory context as in training
    # (`rewards.build_item`, docs/rewards.md)
    row = {"_ground_truth": sample.answers, "_data_source": sample.benchmark, "_ability": ability}
    row["_prompt"] = [{"role": "user", "content": sample.question}]
    reward = score_batch(reward_fn, [build_item(traj, row, view)])[0]
    scores.update(reward=reward.score, reward_correctness=reward.correctness, format_ok=bool(reward.format_ok))
    calls, seen = [], set()
    duplicates = 0
    for call in traj.tool_calls:
        key = (call.tool, _call_key(call.tool, call.content)) if call.content else None
        if key is not None and key in seen:
            duplicates += 1
        if key is not None:
            seen.add(key)
        calls.append(
            {
                "tool": call.tool,
                "content": call.content,
                "status": call.status,
                "cached": bool(call.cached),
                "latency_s": float(call.latency_s),
                "obs_tokens": int(call.obs_tokens),
            }
        )
    statuses = Counter(c["status"] for c in calls)
    segments = _segments(tokenizer, ids, mask)
    return {
        "key": record_key(sample.benchmark, sample.sample_id, run),
        "benchmark": sample.benchmark,
        "sample_id": sample.sample_id,
        "run": run,
        "question": sample.question,
        "answers": sample.answers,
        "label": sample.label,  # the answer field as the file holds it (the reference profile's judge prompt)
        "task": sample.task,
        "prediction": prediction,
        "finish_reason": traj.finish_reason,
        "error": getattr(traj, "error", ""),
        "segments": segments,
        "answer_leak": any(kind == "obs" and answer_leaks(text, sample.answers) for kind, text in segments),
        "tool_calls": calls,
        "tool_counts": dict(Counter(c["tool"] for c in calls)),
        "notices": {"limit": statuses.get("limit", 0), "repeat": statuses.get("repeat", 0)},
        "duplicate_queries": duplicates,
        "limit_hits": statuses.get("limit", 0) + int(bool(traj.hit_call_limit)),
        "tokens": {
            "prompt": prompt_tokens,
            "generated": int(traj.generated_tokens),
            "observation": int(len(mask) - sum(1 for m in mask if m)),
            "response": len(ids),
        },
        "prompt_truncated": prompt_truncated,
        "rounds": len(traj.round_entropies),
        "latency_s": round(latency_s, 4),
        "scores": scores,
        "finished_at": time.time(),
    }


def _endpoint_engine(cls: Any, a: EvalArguments, tokenizer: Any, api_key: str | None, **extra: Any) -> Any:
    r"""The remote engine for `eval_base_url`, its endpoints checked at start (`check_endpoints`).

    `extra`: more constructor arguments (`tool_format` of the chat engine).
    """
    from .endpoint import ResponseCache

    return cls(
        a.eval_base_url,
        tokenizer,
        model=a.eval_model_name,
        api_key=api_key,
        timeout_s=a.eval_request_timeout,
        retries=a.eval_request_retries,
        workers=a.eval_batch_size,
        retry_wait_s=a.eval_retry_wait,
        check=True,
        cache=ResponseCache(a.eval_response_cache) if a.eval_response_cache else None,
        **extra,
    )


def _build_engine(setup: EvalSetup, tokenizer: Any, rollout_config: Any, template: Any = None) -> tuple[Any, Any]:
    r"""`(engine, closer)` for the configured backend (`template`: the run's chat template, for the chat turns)."""
    from ..rollout import build_engine

    a, m = setup.eval_args, setup.model_args
    if a.eval_base_url:
        from .endpoint import EndpointError, OpenAIChatEngine, OpenAICompletionsEngine

        api_key = os.environ.get(a.eval_api_key_env) if a.eval_api_key_env else None
        if a.eval_api_key_env and api_key is None:
            raise EvalConfigError(f"eval_api_key_env names {a.eval_api_key_env}, which is not set")
        try:
            extra = {}
            if a.eval_api == "chat" and agentic_value(setup.finetuning_args, "agentic_tool_protocol") == "template":
                from ..rollout.tool_format import build_tool_format

                extra["tool_format"] = build_tool_format("template", None, template, tokenizer)  # turns mode
            cls = OpenAIChatEngine if a.eval_api == "chat" else OpenAICompletionsEngine
            engine = _endpoint_engine(cls, a, tokenizer, api_key, **extra)
        except EndpointError as err:
            raise EvalConfigError(f"eval_base_url: {err}") from None
        return engine, engine.close
    backend = _backend(setup, None)
    if backend == "hf":
        from llamafactory.model import load_model

        model = load_model(tokenizer, m, setup.finetuning_args, is_trainable=False)
        engine = build_engine("hf", model, tokenizer, rollout_config, max_batch_size=a.eval_batch_size)
        return engine, None
    if backend == "vllm":
        from ..rollout.vllm_engine import LOGPROBS_MODE, VLLMEngine, _import_vllm

        if m.adapter_name_or_path:
            raise EvalConfigError(
                "infer_backend: vllm evaluates full models: merge the adapter first (llamafactory-cli export) or use "
                "infer_backend: huggingface"
            )
        try:
            vllm = _import_vllm()
        except ImportError:
            raise EvalConfigError(VLLM_HINT) from None
        import torch

        llm = vllm.LLM(
            model=m.model_name_or_path,
            trust_remote_code=m.trust_remote_code,
            dtype=m.infer_dtype,
            max_model_len=rollout_config.max_prompt_length + rollout_config.max_response_length,
            tensor_parallel_size=max(torch.cuda.device_count(), 1),
            gpu_memory_utilization=m.vllm_gpu_util,
            enforce_eager=m.vllm_enforce_eager,
            enable_prefix_caching=True,
            seed=setup.eval_args.eval_seed,
            logprobs_mode=LOGPROBS_MODE,  # VLLMEngine refuses vLLM's default raw_logprobs (round entropy)
            **(m.vllm_config or {}),
        )
        return VLLMEngine(None, tokenizer, llm=llm, enable_sleep_mode=False), None
    raise EvalConfigError(f"infer_backend {backend!r} is not supported by the evaluation (huggingface, vllm)")


def _use_browse(executor: Any, a: EvalArguments) -> dict[str, Any]:
    r"""Put a `BrowseSearchTool` in place of every search tool of `executor`; returns the replaced tools by tag.

    The summariser is the `eval_browse_*` chat endpoint (`judge.ChatClient`); fetches, summaries and result lists
    are cached in the executor's tool cache.
    """
    from ..rewards.judge import ChatClient
    from ..tools.browse import Browser, BrowseSearchTool

    api_key = os.environ.get(a.eval_browse_api_key_env) if a.eval_browse_api_key_env else None
    if a.eval_browse_api_key_env and api_key is None:
        raise EvalConfigError(f"eval_browse_api_key_env names {a.eval_browse_api_key_env}, which is not set")
    replaced = {}
    for tag, tool in list(executor.tools.items()):
        if tool.name != "search":
            continue
        summariser = ChatClient(a.eval_browse_base_url, a.eval_browse_model, api_key=api_key,
                                timeout_s=a.eval_judge_timeout, retries=a.eval_judge_retries,
                                retry_wait_s=a.eval_retry_wait)  # fmt: skip
        browser = Browser(summariser, cache=executor.cache, pages=a.eval_browse_pages,
                          page_chars=a.eval_browse_page_chars, summary_chars=a.eval_browse_summary_chars,
                          fetch_timeout_s=a.eval_browse_fetch_timeout,
                          allow_hosts=a.eval_browse_allow_hosts)  # fmt: skip
        replaced[tag] = tool
        executor.tools[tag] = BrowseSearchTool(tool, browser)
    return replaced


def rollout_config_for(
    protocol: Protocol, eos_token_id: int, backend: str, batch_size: int, seed: int, contamination_mode: str = "log"
) -> Any:
    r"""The `RolloutConfig` that makes the training agent loop follow `protocol`.

    `contamination_mode`: `agentic_contamination_mode` (search results holding the sample's answer: `log`, `mask`,
    `drop`; docs/plan.md §3).
    """
    from ..train.arpo.config import default_rollout_config

    stops = tuple(protocol.stop_strings) + ((SELF_RESULT_STOP,) if protocol.drop_self_results else ())
    return default_rollout_config(
        group_size=1,
        initial_rollouts=1,
        max_prompt_length=protocol.max_prompt_length,
        max_response_length=protocol.max_response_length,
        max_tool_calls=UNLIMITED_CALLS if protocol.max_tool_calls is None else protocol.max_tool_calls,
        temperature=protocol.temperature,
        top_p=protocol.top_p,
        top_k=protocol.top_k,
        eos_token_id=int(eos_token_id),
        stop_strings=stops,
        backend="vllm" if backend == "vllm" else "hf",
        hf_generation_batch_size=batch_size,
        seed=seed,
        max_round_tokens=protocol.max_new_tokens,
        tool_call_limits=dict(protocol.tool_call_limits) or None,
        repeat_notice_tools=("search",) if protocol.repeat_notice else (),
        repetition_penalty=protocol.repetition_penalty,
        trajectory_timeout_s=protocol.sample_timeout_s,
        contamination_mode=contamination_mode,
    )


def _generate(
    setup: EvalSetup,
    protocol: Protocol,
    todo: list[tuple[Sample, int]],
    output_dir: Path,
    shard: tuple[int, int],
    engine: Any = None,
    executor: Any = None,
    prompts: dict[str, str] | None = None,
    browse: bool = False,
) -> dict[str, float]:
    r"""Generate and append the records of `todo`; returns the loop's counters and timing.

    `prompts` maps a benchmark to its reference prompt type (`BenchmarkSpec.prompt`) for `eval_system_prompt: reference`.
    `browse`: the search tool runs in the `browse` mode (`tools/browse.py`, the `eval_browse_*` summariser).
    """
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.model import load_tokenizer

    from ..guards.tags import no_tool_call_warning, warn_unanswered_tags
    from ..rewards import get_reward_function
    from ..rollout.session import open_rollout_session

    a = setup.eval_args
    tokenizer = load_tokenizer(setup.model_args)["tokenizer"]
    template = get_template_and_fix_tokenizer(tokenizer, setup.data_args)
    backend = _backend(setup, engine)
    guard = agentic_value(setup.finetuning_args, "agentic_contamination_mode")
    config = rollout_config_for(protocol, tokenizer.eos_token_id, backend, a.eval_batch_size, a.eval_seed, guard)
    closer = None
    if engine is None:
        engine, closer = _build_engine(setup, tokenizer, config, template)
    # the run's tool keys build the executor (closed with the session) unless the caller passed one (kept open)
    tools = executor if executor is not None else setup.finetuning_args
    protocol_name = agentic_value(setup.finetuning_args, "agentic_tool_protocol")  # the tool-call format (RL = eval)
    session = open_rollout_session(config, tokenizer, tools=tools, engine=engine, closer=closer,
                                   tool_protocol=protocol_name, template=template)  # fmt: skip
    snippet_tools = _use_browse(session.executor, a) if browse else {}
    reward_fn = get_reward_function(protocol.reward["agentic_reward"], protocol.reward["agentic_reward_math"])
    setting = system_prompt_setting(a)
    systems = {name: resolve_system_prompt(setting, prompt) for name, prompt in (prompts or {}).items()}
    default_system = resolve_system_prompt(setting)
    started: dict[str, tuple[float, int, bool]] = {}
    truncated = Counter()
    if protocol_name != "template":  # a tag the prompts teach that no tool of this run answers (issue 35)
        texts = {sample.system or systems.get(sample.benchmark, default_system) for sample, _ in todo}
        warn_unanswered_tags(texts, session.executor, "the system prompts of this evaluation")
    calls = [0, 0]  # tool calls, trajectories

    def items():
        for sample, run in todo:
            key = record_key(sample.benchmark, sample.sample_id, run)
            system = systems.get(sample.benchmark, default_system)
            ids = _prompt_ids(sample, system, template, tokenizer)
            cut = len(ids) > protocol.max_prompt_length
            if cut:
                ids = ids[-protocol.max_prompt_length :]
                truncated[sample.benchmark] += 1
            if hasattr(engine, "register_prompt"):  # chat API: the messages behind these ids
                messages = list(sample.messages or [{"role": "user", "content": sample.question}])
                session.register_prompt(ids, messages, sample.system or system)
            started[key] = (time.perf_counter(), len(ids), cut)
            yield (sample, run), ids, _item_seed(protocol.seed, key), (sample.answers if guard != "log" else None)

    from tqdm.auto import tqdm

    bar = tqdm(total=len(todo), desc=f"{LOG_PREFIX} generating", disable=not a.eval_progress, dynamic_ncols=True)
    writer = RecordWriter(output_dir, *shard)

    def on_finished(item: tuple[Sample, int], traj: Any) -> None:
        sample, run = item
        t0, n_prompt, cut = started.pop(record_key(sample.benchmark, sample.sample_id, run))
        record = build_record(sample, run, traj, tokenizer, reward_fn, time.perf_counter() - t0, n_prompt, cut)
        calls[0] += len(getattr(traj, "tool_calls", None) or ())
        calls[1] += 1
        writer.write(record)
        bar.update(1)

    t0 = time.perf_counter()
    try:
        counters = session.stream(items(), on_finished, max_in_flight=a.eval_batch_size)
    finally:
        writer.close()
        bar.close()
        for tag, tool in snippet_tools.items():  # the caller's executor gets its own tools back
            session.executor.tools[tag].browser.close()
            session.executor.tools[tag] = tool
        session.close()
    counters["time/total"] = time.perf_counter() - t0
    warning = no_tool_call_warning("evaluation", *calls)
    if warning:
        logger.warning(f"{LOG_PREFIX} {warning}")
    for bench, count in truncated.items():
        logger.warning(
            f"{LOG_PREFIX} {bench}: {count} prompts longer than {protocol.max_prompt_length} tokens were cut"
        )
    return counters


# ---------------------------------------------------------------------------------------------- scoring
def _judge_from(scoring: dict[str, Any], output_dir: Path, temperature: float | None = 0.0) -> Any:
    r"""The LLM judge of `scoring` (None without one); `temperature` None sends none (the reference profile's)."""
    from ..rewards.judge import LLMJudge, VerdictCache

    if not scoring.get("judge_base_url"):
        return None
    key_env = scoring.get("judge_api_key_env")
    api_key = os.environ.get(key_env) if key_env else None
    if key_env and api_key is None:
        raise EvalConfigError(f"eval_judge_api_key_env names {key_env}, which is not set")
    cache = VerdictCache(scoring.get("judge_cache") or output_dir / "judge_cache.sqlite")
    return LLMJudge(
        scoring["judge_base_url"],
        scoring["judge_model"],
        cache,
        api_key=api_key,
        timeout_s=float(scoring.get("judge_timeout", 120.0)),
        retries=int(scoring.get("judge_retries", 3)),
        workers=int(scoring.get("judge_workers", 16)),
        retry_wait_s=float(scoring.get("judge_retry_wait_s", 1.0)),
        temperature=temperature,
    )


# headline `source` of a judge-headline record by its verdict's source: the judge saw it (`judge`, a reply now or
# cached), or it never did: equivalent by rule (no call) or no prediction to judge (no call)
JUDGE_HEADLINE_SOURCES = {
    "judge": "judge",
    "cache": "judge",
    "rule": "rule_equivalent",
    "no_prediction": "no_prediction",
}


def score_records(
    records: list[dict[str, Any]], meta: dict[str, Any], scoring: dict[str, Any], output_dir: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    r"""Add the judge verdict and the headline to every record.

    Returns:
        `(scored records, judge statistics: calls, errors, cached verdicts)`.
    """
    from .reference import (
        REFERENCE_JUDGE_TEMPERATURE,
        reference_headline,
        reference_judge_item,
        reference_prediction,
        reference_scores,
    )

    judge = _judge_from(scoring, output_dir)
    override = scoring.get("headline_metric")
    verdicts = [None] * len(records)
    ref_verdicts = [None] * len(records)
    references: list[dict[str, Any] | None] = [None] * len(records)
    for i, r in enumerate(records):
        if not is_error(r):
            prediction = reference_prediction("".join(text for _, text in r.get("segments") or []))
            references[i] = {"prediction": prediction, "scores": reference_scores(prediction, r["answers"], r["task"])}
    stats: dict[str, Any] = {"configured": judge is not None, "calls": 0, "errors": 0}
    if judge is not None:
        todo = [i for i, r in enumerate(records) if not is_error(r)]  # a failed generation is never judged
        items = [
            {
                "question": records[i]["question"],
                "answers": records[i]["answers"],
                "prediction": records[i]["prediction"],
                "equivalent": rule_equivalent(records[i]["scores"]),
            }
            for i in todo
        ]
        # the reference profile asks the judge about its own prediction with the reference's request (judge-headline
        # sets; cached apart from the current profile's verdicts, deduplicated)
        ref_todo = [i for i in todo if (override or meta["benchmarks"][records[i]["benchmark"]]["metric"]) == "judge"]
        ref_items = [reference_judge_item(records[i], references[i]["prediction"]) for i in ref_todo]
        ref_judge = _judge_from(scoring, output_dir, REFERENCE_JUDGE_TEMPERATURE) if ref_items else None
        try:
            for i, verdict in zip(todo, judge.judge_many(items)):
                verdicts[i] = verdict
            if ref_judge is not None:
                for i, verdict in zip(ref_todo, ref_judge.judge_many(ref_items)):
                    ref_verdicts[i] = verdict
        finally:
            sources = Counter(v.source for v in verdicts if v is not None)
            both = [j for j in (judge, ref_judge) if j is not None]
            stats.update(calls=sum(j.calls for j in both), errors=sum(j.errors for j in both),
                         cached_verdicts=len(judge.cache), sources=dict(sources))  # fmt: skip
            for j in both:
                j.close()
                j.cache.close()
    scored = []
    for record, verdict, ref, ref_verdict in zip(records, verdicts, references, ref_verdicts):
        metric = override or meta["benchmarks"][record["benchmark"]]["metric"]
        judge_info = None if verdict is None else asdict(verdict)
        if is_error(record):
            head = unscored(metric, "generation_error")
            scored.append({**record, "judge": None, "headline": head, "reference": {"headline": head}})
            continue
        if verdict is not None and verdict.source == "error" and metric == "judge":
            current = unscored(metric, "judge_error")
        else:
            value, correct, source = headline(
                metric,
                record["scores"],
                None if verdict is None else verdict.correct,
                judge_error=verdict is not None and verdict.source == "error",
            )
            if source == "judge":  # only where the judge saw the record
                source = JUDGE_HEADLINE_SOURCES.get(verdict.source, source)
            current = {"metric": metric, "value": value, "correct": correct, "source": source}
        if ref_verdict is not None and ref_verdict.source == "error":
            ref_head = unscored(metric, "judge_error")
        elif metric in ("reward", "accuracy"):  # the training's reward has no reference counterpart
            ref_head = dict(current)
        else:
            value, correct = reference_headline(
                metric, record["task"], ref["scores"], None if ref_verdict is None else ref_verdict.reference_correct
            )  # the reference's reading of the reply (a hedge counts as correct there; judge.reply_says_correct)
            source = (
                JUDGE_HEADLINE_SOURCES[ref_verdict.source] if ref_verdict is not None and metric == "judge" else metric
            )
            ref_head = {"metric": metric, "value": float(value), "correct": bool(correct), "source": source}
        reference = {**ref, "judge": None if ref_verdict is None else asdict(ref_verdict), "headline": ref_head}
        scored.append({**record, "judge": judge_info, "headline": current, "reference": reference})
    return scored, stats


def unscored(metric: str, source: str) -> dict[str, Any]:
    r"""The headline of a record that is not scored: `value` and `correct` None, `source` says why.

    `generation_error`: the engine gave no answer after its retries; `judge_error`: the headline is the judge's
    verdict and its call failed after its retries. Such records count in `errors`, never in pass@1 or pass@k.
    """
    return {"metric": metric, "value": None, "correct": None, "source": source}


def error_summary(metrics: dict[str, Any], max_rate: float) -> dict[str, Any]:
    r"""Run-level error counts of aggregated metrics.

    Returns:
        `generation`, `judge`, `total`, `records`, `rate` (total / records), `max_rate` and `exceeded`
        (rate > max_rate: `eval` exits 3).
    """
    gen = sum(b["errors"]["generation"] for b in metrics["benchmarks"].values())
    jud = sum(b["errors"]["judge"] for b in metrics["benchmarks"].values())
    records = sum(b["n_records"] for b in metrics["benchmarks"].values())
    rate = (gen + jud) / records if records else 0.0
    return {
        "generation": gen,
        "judge": jud,
        "total": gen + jud,
        "records": records,
        "rate": rate,
        "max_rate": float(max_rate),
        "exceeded": rate > float(max_rate),
    }


def expected_keys(meta: dict[str, Any]) -> list[str]:
    r"""Every record key of the run described by `run.json`."""
    return [
        record_key(name, str(i), run)
        for name, b in meta["benchmarks"].items()
        for i in range(int(b["samples"]))
        for run in range(int(meta["protocol"]["runs"]))
    ]


def shard_status(out: Path, expected: list[str], have: set[str], num_shards: int) -> list[dict[str, Any]]:
    r"""Per shard that is not complete: `shard` ("i/N"), `file`, whether it exists, `missing` and `expected` records.

    Shard i owns every N-th record key of the run's order starting at i (as `eval_shard=i/N` generates them).
    """
    from .records import records_file_name

    status = []
    for shard in range(num_shards):
        mine = expected[shard::num_shards]
        missing = sum(1 for key in mine if key not in have)
        if missing:
            name = records_file_name(shard, num_shards)
            status.append({"shard": f"{shard}/{num_shards}", "file": name, "exists": (out / name).is_file(),
                           "missing": missing, "expected": len(mine)})  # fmt: skip
    return status


def finalize(output_dir: str | os.PathLike, scoring: dict[str, Any] | None = None) -> dict[str, Any]:
    r"""Judge, aggregate and write the result files of a complete run (all shards); `eval merge` calls this too.

    Args:
        output_dir: The output folder with `run.json` and the records.
        scoring: Judge and headline settings (default: those saved in `run.json`).

    Returns:
        The metrics (`complete: False` with the record count when shards are still missing).

    Raises:
        FileNotFoundError: no `run.json` in the folder.
    """
    from .metrics import aggregate, write_summary_csv, write_summary_md
    from .report import write_report

    out = Path(output_dir)
    if not (out / "run.json").is_file():
        raise FileNotFoundError(f"{out} holds no evaluation run (run.json is missing)")
    meta = json.loads((out / "run.json").read_text(encoding="utf-8"))
    scoring = dict(meta.get("scoring") or {}) if scoring is None else scoring
    records = load_all_records(out)
    expected = expected_keys(meta)
    have = {r["key"] for r in records}
    missing = [k for k in expected if k not in have]
    if missing:
        return {
            "complete": False,
            "records": len(have),
            "expected": len(expected),
            "missing_example": missing[:3],
            "shards": shard_status(out, expected, have, int(meta.get("num_shards") or 1)),
        }
    wanted = set(expected)
    order = {k: i for i, k in enumerate(expected)}
    records = sorted((r for r in records if r["key"] in wanted), key=lambda r: order[r["key"]])
    t0 = time.perf_counter()
    scored, judge_stats = score_records(records, meta, scoring, out)
    judge_stats["seconds"] = time.perf_counter() - t0
    groups = meta.get("groups") or {}
    metrics = aggregate(scored, int(meta["protocol"]["runs"]), groups, order=list(meta["benchmarks"]))
    latency = {}
    for name, bench in metrics["benchmarks"].items():
        latency[name] = bench.pop("latency_s_mean")
    metrics = {
        "complete": True,
        "errors": error_summary(metrics, float(scoring.get("max_error_rate", 0.0))),
        "fingerprint": meta["fingerprint"],
        "protocol": meta["protocol"],
        "protocol_sources": meta.get("protocol_sources") or {},
        "training_config": meta.get("training_config"),
        "model": meta["model"],
        "versions": meta["versions"],
        **metrics,
        "judge": judge_stats,
        "timing": {"latency_s_mean": latency},
        "warnings": meta.get("warnings", []),
    }
    info = {**meta, "model_label": model_label(meta["model"])}
    _write(out / "metrics.json", json.dumps(metrics, indent=2, ensure_ascii=False) + "\n")
    _write(out / "summary.md", write_summary_md(metrics, info))
    _write(out / "summary.csv", write_summary_csv(metrics))
    _write(out / "scored.jsonl", "".join(json.dumps(compact(r), ensure_ascii=False) + "\n" for r in scored))
    if scoring.get("report", True):
        write_report(out / "report.html", metrics, scored, info, int(scoring.get("report_max_trajectories", 5000)))
    return metrics


def compact(record: dict[str, Any]) -> dict[str, Any]:
    r"""A scored record without its response text (the lines of `scored.jsonl`, read by `eval compare`)."""
    return {k: v for k, v in record.items() if k not in ("segments",)}


def model_label(model: dict[str, Any]) -> str:
    r"""Short name of the evaluated model for titles."""
    name = str(model.get("model_name_or_path") or "model").rstrip("/").split("/")[-1]
    adapter = model.get("adapter_name_or_path")
    if adapter:
        name += " + " + ",".join(str(a).rstrip("/").split("/")[-1] for a in adapter)
    if model.get("served_model"):
        name += f" ({model['served_model']})"
    return name


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + f".tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------- entry point
def evaluate(
    config: str | os.PathLike | dict[str, Any] | EvalSetup,
    overrides: list[str] | dict | None = None,
    *,
    engine: Any = None,
    executor: Any = None,
) -> dict[str, Any]:
    r"""Evaluate a model on benchmarks under a protocol preset; resumable, shardable.

    Args:
        config: A YAML path, a dict of keys (e.g. `{"model_name_or_path": ..., "template": "qwen",
            "eval_preset": "train_val", "eval_benchmarks": [...], "eval_output_dir": ...}`) or an `EvalSetup`.
        overrides: `key=value` strings or a dict applied on top of `config`.
        engine: A `rollout.GenerationEngine` to use instead of building one (tests, custom serving).
        executor: A tool executor to use instead of `build_executor_from_args` (it is not closed here).

    Returns:
        The metrics (the content of `metrics.json`); with shards still running, `{"complete": False, ...}`.

    Raises:
        EvalConfigError: a bad key or value. BenchmarkError: a benchmark cannot be read. ResumeError: the output
        folder holds another run and `eval_overwrite` is not set.
    """
    setup = config if isinstance(config, EvalSetup) else parse_eval_config(config, overrides)
    a = setup.eval_args
    if not a.eval_output_dir:
        raise EvalConfigError("eval_output_dir is not set: name the folder for records and results")
    if not a.eval_benchmarks:
        raise EvalConfigError("eval_benchmarks is not set: name registry benchmarks, groups or files")
    registry = load_registry(a.eval_registry)
    specs = resolve_benchmarks(a.eval_benchmarks, registry, a.eval_data_dir)
    max_samples = resolve_max_samples(a)
    benchmarks: list[Benchmark] = [load_benchmark(spec, max_samples) for spec in specs]
    training = apply_training_tools(setup) if a.eval_preset == "train_val" else None
    protocol = resolve_protocol(a, setup.finetuning_args, setup.model_args)
    sources = protocol_sources(a, setup.given, training)
    if a.eval_headline_metric is not None and a.eval_headline_metric not in ("f1", "em", "judge", "math_equiv",
                                                                               "reward", "accuracy"):  # fmt: skip
        raise EvalConfigError(f"eval_headline_metric {a.eval_headline_metric!r} is not a known metric")
    shard, num_shards = parse_shard(a.eval_shard)
    warnings = [w for b in benchmarks for w in b.warnings] + list((training or {}).get("conflicts") or [])
    browse = [b.spec.name for b in benchmarks if b.spec.search_mode == "browse"]
    if browse and a.eval_search_mode != "browse":
        warnings.append(
            f"{', '.join(browse)}: the paper browsed pages with a summariser; this run used snippets "
            "(eval_search_mode: browse runs that protocol)"
        )
    browsing = set(browse) if a.eval_search_mode == "browse" else set()
    for warning in warnings:
        logger.warning(f"{LOG_PREFIX} {warning}")
    for b in benchmarks:
        entry = (
            f"registry entry {b.spec.registry_entry}" if b.spec.registry_entry else "not in the registry (defaults)"
        )
        logger.info(
            f"{LOG_PREFIX} {b.spec.name}: {b.path} ({len(b.samples)} rows, {b.spec.format}), {entry}; headline "
            f"{a.eval_headline_metric or b.spec.metric}, task {b.spec.task}, "
            f"search {'browse' if b.spec.name in browsing else 'snippets'}"
        )
    m = setup.model_args
    meta = {
        "fingerprint": protocol.fingerprint,
        "protocol": protocol.to_dict(),
        "model": {
            "model_name_or_path": m.model_name_or_path,
            "adapter_name_or_path": m.adapter_name_or_path,
            "template": setup.data_args.template,
            "backend": _backend(setup, engine),
            "base_url": a.eval_base_url,
            **({"api": "chat"} if a.eval_base_url and a.eval_api == "chat" else {}),
            "served_model": a.eval_model_name,
        },
        "benchmarks": {
            b.spec.name: {
                "path": b.path,
                "sha256": b.sha256,
                "samples": len(b.samples),
                "metric": b.spec.metric,
                "task": b.spec.task,
                "search_mode": "browse" if b.spec.name in browsing else "snippets",
                "registry_entry": b.spec.registry_entry,
                "prompt": b.spec.prompt,
                "format": b.spec.format,
                "rows": b.rows,  # rows of the file; `samples` < `rows` when capped (eval_max_samples, `paper`: 500)
                "max_samples": max_samples,
            }
            for b in benchmarks
        },
        "protocol_sources": sources,
        "training_config": (training or {}).get("source") or None,
        "groups": registry.groups,
        "num_shards": num_shards,
        "scoring": {
            "judge_base_url": a.eval_judge_base_url,
            "judge_model": a.eval_judge_model,
            "judge_api_key_env": a.eval_judge_api_key_env,
            "judge_workers": a.eval_judge_workers,
            "judge_timeout": a.eval_judge_timeout,
            "judge_retries": a.eval_judge_retries,
            "judge_retry_wait_s": a.eval_retry_wait,
            "max_error_rate": a.eval_max_error_rate,
            "judge_cache": a.eval_judge_cache,
            "headline_metric": a.eval_headline_metric,
            "report": a.eval_report,
            "report_max_trajectories": a.eval_report_max_trajectories,
        },
        "versions": _versions(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "warnings": warnings,
    }
    from .metrics import protocol_lines

    logger.info(f"{LOG_PREFIX} protocol (value and where it came from):\n" + "\n".join(protocol_lines(meta)))
    out = Path(a.eval_output_dir)
    open_run(out, meta, overwrite=a.eval_overwrite)
    existing = load_all_records(out)
    done = {r["key"] for r in existing if not is_error(r)}
    failed = {r["key"] for r in existing if is_error(r)}
    work = [(sample, run) for b in benchmarks for sample in b.samples for run in range(protocol.runs)]
    mine = [item for i, item in enumerate(work) if i % num_shards == shard]
    todo = [(s, r) for s, r in mine if record_key(s.benchmark, s.sample_id, r) not in done]
    retried = sum(1 for s, r in todo if record_key(s.benchmark, s.sample_id, r) in failed)
    logger.info(
        f"{LOG_PREFIX} fingerprint {protocol.fingerprint}: {len(work)} records in the run, {len(mine)} in shard "
        f"{shard}/{num_shards}, {len(mine) - len(todo)} already done, {len(todo)} to generate"
        + (f" ({retried} of them generation errors of an earlier pass, retried)" if retried else "")
    )
    prompts = {b.spec.name: b.spec.prompt for b in benchmarks}
    counters: dict[str, float] = {}
    for browse_part in (False, True):  # the browsing sets get their own pass with the search tool in browse mode
        part = [(s, r) for s, r in todo if (s.benchmark in browsing) is browse_part]
        if part:
            got = _generate(setup, protocol, part, out, (shard, num_shards), engine, executor, prompts, browse_part)
            for key, value in got.items():
                counters[key] = counters.get(key, 0.0) + value
    with _file_lock(out / ".finalize.lock", blocking=True):
        metrics = finalize(out, {**meta["scoring"]})
    if counters and metrics.get("complete"):
        metrics["timing"]["generation"] = counters
    return metrics
