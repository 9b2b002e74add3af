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

"""`run_arpo`: the `arpo` and `aepo` stages in LLaMA-Factory's workflow style (cf. `llamafactory/train/ppo/workflow.py`).

LLaMA-Factory's loaders do the model work (`load_tokenizer`, `get_template_and_fix_tokenizer`, `load_model`,
`create_ref_model`), so full, freeze, LoRA, quantised and DeepSpeed set-ups behave as in its other stages; the plugin
adds the RL dataset, the presets, the tool executor, the rollout engine and the trainer.
"""

from typing import TYPE_CHECKING, Any

from ..presets import record_system_prompt, resolve_presets, save_agentic_config, training_system_prompt


if TYPE_CHECKING:
    from transformers import Seq2SeqTrainingArguments, TrainerCallback


PLOT_KEYS = (
    "loss",
    "reward",
    "reward/accuracy",
    "reward/identical_groups",
    "dynamic_sampling/identical_groups_in_update",  # only with rl_dynamic_sampling (plot_loss skips absent keys)
    "rollout/tool_calls_per_traj",
    "rollout/response_length",
    "rollout/branches",
    "loss/entropy",
    "loss/clip_frac",
    "eval_reward",
    "eval_reward/accuracy",
)


def _warn_empty_thought(template: Any, data_args: Any, finetuning_args: Any) -> None:
    r"""Warn when the prompt ends with an empty thought but the reward's format gate wants the response to think.

    A reasoning template (e.g. `qwen3`) with `enable_thinking: false` puts `<think>\n\n</think>` into the prompt, so
    the policy writes no `<think>` block of its own; the reference reward's format gate (rule 1,
    `rewards.deep_research.validate_format`, docs/algorithms.md §6.1) then scores every trajectory -1 and every
    advantage is 0. A compound reward (`agentic_reward_funcs`) decides its own format rules, so it is not warned about.
    """
    from ...common.log import get_logger

    thinking_off = getattr(template, "enable_thinking", None) is False or data_args.enable_thinking is False
    if getattr(template, "thought_words", None) and thinking_off and not finetuning_args.agentic_reward_funcs:
        logger = get_logger(__name__)
        getattr(logger, "warning_rank0", logger.warning)(
            f"template {data_args.template!r} with enable_thinking: false ends every prompt with an empty thought, "
            f"so the policy writes no <think> block, and agentic_reward {finetuning_args.agentic_reward!r} (format "
            "rule 1: <think> at least once) scores every trajectory -1: no learning signal. Set enable_thinking: "
            "true, or a reward without that rule through agentic_reward_funcs (docs/rewards.md)."
        )


def _warn_start(model_args: Any, training_args: Any) -> None:
    r"""Warnings before an RL run: a policy with no sign of a cold start, and the tokens-seen counter.

    LLaMA-Board sets `include_num_input_tokens_seen` for every run; transformers counts it from the dataloader's
    `input_ids`, which an RL batch (prompts before the rollout) does not have, so every step logged "Tried to track
    the number of tokens seen". It is turned off here; the tokens a step trains are in `rollout/*`.
    """
    from ...common.log import get_logger
    from ...guards.cold_start import cold_start_warning

    logger = get_logger(__name__)
    warn = getattr(logger, "warning_rank0", logger.warning)
    message = cold_start_warning(model_args.model_name_or_path, getattr(model_args, "adapter_name_or_path", None))
    if message:
        warn(message)
    if getattr(training_args, "include_num_input_tokens_seen", "no") not in ("no", False, None):
        training_args.include_num_input_tokens_seen = "no"
        getattr(logger, "info_rank0", logger.info)(
            "include_num_input_tokens_seen: not counted for RL stages (a batch is prompts; rollout/* has the tokens)"
        )


def _log_plan(model_args: Any, data_args: Any, training_args: Any, finetuning_args: Any) -> None:
    r"""Log `llamafactory-agentic plan`'s table for this run first (docs/plan.md); a plan that fails never stops it."""
    from ...common.log import get_logger
    from ...guards.plan import plan_for_run

    logger = get_logger(__name__)
    try:
        text = plan_for_run(model_args, data_args, training_args, finetuning_args).format()
    except Exception as err:  # the plan is advice: an unknown model shape or dataset must not stop the run
        getattr(logger, "warning_rank0", logger.warning)(f"plan: not available ({type(err).__name__}: {err})")
        return
    getattr(logger, "info_rank0", logger.info)("\n" + text)


def _encode(dataset: Any, template: Any, tokenizer: Any, max_prompt_length: int, overlong: str) -> Any:
    from ...data import encode_rl_prompts

    if dataset is None:
        return None
    if isinstance(dataset, dict):
        return {
            name: encode_rl_prompts(ds, template, tokenizer, max_prompt_length, overlong)
            for name, ds in dataset.items()
        }
    return encode_rl_prompts(dataset, template, tokenizer, max_prompt_length, overlong)


def _system_column(dataset: Any) -> list[str]:
    if isinstance(dataset, dict):
        dataset = next(iter(dataset.values()), None)
    if dataset is None or "_system" not in getattr(dataset, "column_names", ()):
        return []
    return list(dataset["_system"])


def check_template_choice(tokenizer: Any, template: str | None, model_name: str | None = None) -> None:
    r"""Refuse a run with no `template` whose tokenizer has no chat template (called right after the tokenizer loads).

    LLaMA-Factory then renders with its `empty` template (`get_template_and_fix_tokenizer`): the prompts get no chat
    turns, the policy never produces the answer format and every reward is -1, while the run ends with status 0.
    Without `template` but with a tokenizer chat template, LLaMA-Factory parses that one, which is kept.

    Args:
        tokenizer: The loaded tokenizer.
        template: `data_args.template` (None when the recipe sets none).
        model_name: `model_name_or_path`, named in the message.

    Raises:
        ValueError: naming the model and the fix (`template: <name>`).
    """
    if template is None and not isinstance(getattr(tokenizer, "chat_template", None), str):
        raise ValueError(
            f"No `template` is set and the tokenizer of {model_name or 'the model'} has no chat template, so "
            "LLaMA-Factory would render the prompts with its `empty` template (no chat turns): every reward would be "
            "-1. Set `template: <name>` to the model's LLaMA-Factory template (e.g. `template: qwen` for Qwen2/2.5, "
            "`qwen3`, `llama3`), as the recipes do."
        )


def run_arpo(
    model_args: Any,
    data_args: Any,
    training_args: "Seq2SeqTrainingArguments",
    finetuning_args: Any,
    generating_args: Any,
    callbacks: list["TrainerCallback"] | None = None,
) -> None:
    r"""Train and/or validate with ARPO or AEPO; `finetuning_args.stage` selects the preset (docs/algorithms.md §5.5).

    Steps: refuse an explicit `resume_from_checkpoint` whose save was interrupted, and a checkpoint (explicit or
    auto-resumed) of another stage (`train.checkpoints.check_rl_resume`); resolve
    the presets (printed with a warning per key set without effect, saved as `agentic_config.json` in
    `output_dir`); build the tool executor first (a bad tool config, or a python sandbox whose measured isolation is
    below `agentic_python_min_isolation`, stops the run before anything is loaded); load the tokenizer, refuse a run
    with neither `template` nor a tokenizer chat template (`check_template_choice`), load the template and check that
    the tags are ordinary text for the tokenizer (`check_tokenizer_tags`); load the RL prompts (`formatting: arpo_rl`, rendered with the chat
    template; prompts longer than `arpo_max_prompt_length` are skipped or stop the run, `arpo_overlong_prompt`); load
    the policy with LLaMA-Factory (and a reference model only when `rl_kl_coef > 0` and not LoRA); open the rollout
    session (`rollout.session.open_rollout_session`: engine per `arpo_rollout_backend`, agent loop, the executor) and
    the reward; train with `resume_from_checkpoint`; save the model
    in Hugging Face format (loadable by `llamafactory-cli chat/export`), the trainer state and the metric plots. The
    executor is closed however the run ends.

    Args:
        model_args: LLaMA-Factory `ModelArguments`.
        data_args: LLaMA-Factory `DataArguments` (`dataset`, `eval_dataset`, `dataset_dir`, `template`, ...).
        training_args: LLaMA-Factory's `Seq2SeqTrainingArguments`.
        finetuning_args: LLaMA-Factory `FinetuningArguments` with the plugin's fields (`stage` = `arpo` or `aepo`).
        generating_args: LLaMA-Factory `GeneratingArguments`: rollout `temperature`, `top_p`, `top_k` (recipes set
            1.0 / 1.0 / 0, docs/algorithms.md §10).
        callbacks: Callbacks LLaMA-Factory built (LogCallback, reporters, ...).

    Raises:
        ValueError, FileNotFoundError, KeyError, CacheError: a bad `agentic_*` tool key or tool config, or a cache that
            cannot be opened (see `build_executor_from_args`), before the tokenizer is loaded.
        IsolationError: the python tool's measured isolation is below `agentic_python_min_isolation`.
        ImportError: `arpo_rollout_backend: vllm` without vLLM installed (before the executor and the model).
        AgenticSFTCheckError: a tag (`<think>`, `<search>`, `<python>`, `<result>`, `<answer>`, ...) is a special or
            added token of the tokenizer or does not round-trip (checked before the data and the policy are loaded).
        RLDataError: a malformed row, or an over-long prompt with `arpo_overlong_prompt: error` (see
            `load_rl_dataset`, `encode_rl_prompts`).
        ValueError: greedy decoding for training (`do_sample: false` or `temperature <= 0`) or `top_p`/`top_k` out
            of range (see `check_rl_sampling`), an incomplete `resume_from_checkpoint` or another stage's, no template (see
            `check_template_choice`), inconsistent batch geometry (see `derive_steps_per_generation`) or unresolvable
            keys.
    """
    from ...tools import build_executor_from_args
    from ..checkpoints import check_rl_resume, resolve_resume_checkpoint
    from .config import ArpoLossConfig, check_rl_sampling, tools_config_from_args

    if training_args.do_train:
        check_rl_sampling(generating_args)  # before any model is loaded
        training_args.resume_from_checkpoint = resolve_resume_checkpoint(
            training_args.resume_from_checkpoint, training_args.output_dir
        )
        check_rl_resume(training_args.resume_from_checkpoint, finetuning_args.stage)  # not another stage's
        _warn_start(model_args, training_args)
    effective = resolve_presets(finetuning_args, verbose=training_args.should_log)
    from ...rollout.engine import check_engine_available

    check_engine_available(finetuning_args.arpo_rollout_backend)  # e.g. vLLM's install hint before anything loads
    if training_args.should_save:
        save_agentic_config(effective, training_args.output_dir, finetuning_args)  # every key: eval train_val
    ArpoLossConfig.from_args(finetuning_args)  # the loss keys and their combination, before any model loads (§4.8)

    # first: a bad tool config or a python sandbox below `agentic_python_min_isolation` stops the run here
    tools_config = tools_config_from_args(finetuning_args)
    executor = build_executor_from_args(tools_config)
    try:  # the executor is closed (cache writes flushed, workers stopped) however the run ends
        _train(
            executor, tools_config, model_args, data_args, training_args, finetuning_args, generating_args, callbacks
        )
    finally:
        executor.close()


def _train(
    executor: Any,
    tools_config: Any,
    model_args: Any,
    data_args: Any,
    training_args: "Seq2SeqTrainingArguments",
    finetuning_args: Any,
    generating_args: Any,
    callbacks: list["TrainerCallback"] | None,
) -> None:
    r"""`run_arpo` once the tool executor is built: load the data and the model, build the rollout, train, validate."""
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.extras.ploting import plot_loss
    from llamafactory.model import load_model, load_tokenizer
    from llamafactory.train.trainer_utils import create_ref_model

    from ...data import load_rl_dataset
    from ...guards.gaming import GamingMonitorCallback
    from ...guards.tags import warn_unanswered_tags
    from ...rewards.compound import reward_from_args
    from ...rollout.session import open_rollout_session
    from ..agentic_sft.check import check_tokenizer_tags
    from ..log_callback import extend_log_callback
    from .config import build_run_config
    from .trainer import ArpoTrainer

    _log_plan(model_args, data_args, training_args, finetuning_args)
    tokenizer_module = load_tokenizer(model_args)
    tokenizer = tokenizer_module["tokenizer"]
    check_template_choice(tokenizer, data_args.template, model_args.model_name_or_path)
    template = get_template_and_fix_tokenizer(tokenizer, data_args)
    _warn_empty_thought(template, data_args, finetuning_args)
    # the reward decodes the model view with skip_special_tokens: a tag that is a special token would vanish and every
    # answer would score -1 without a word (the same check as agentic_sft's pre-run check)
    check_tokenizer_tags(tokenizer)
    dataset_module = load_rl_dataset(model_args, data_args, training_args, finetuning_args)
    if finetuning_args.agentic_tool_protocol != "template":  # a tag the prompts teach that no tool answers
        for split, names in (("train_dataset", data_args.dataset), ("eval_dataset", data_args.eval_dataset)):
            rows = dataset_module.get(split)
            if rows is not None and "_system" in rows.column_names:
                where = f"the system prompts of {', '.join(names or data_args.dataset or [])} ({split.split('_')[0]})"
                warn_unanswered_tags(rows.unique("_system"), executor, where)
    max_prompt = finetuning_args.arpo_max_prompt_length
    overlong = finetuning_args.arpo_overlong_prompt
    train_dataset = _encode(dataset_module.get("train_dataset"), template, tokenizer, max_prompt, overlong)
    eval_dataset = _encode(dataset_module.get("eval_dataset"), template, tokenizer, max_prompt, overlong)
    if training_args.should_save:  # LLaMA-Board's Chat fills its system prompt with the one training rendered
        systems = _system_column(train_dataset if train_dataset is not None else eval_dataset)
        record_system_prompt(training_args.output_dir, training_system_prompt(systems, template.default_system))

    model = load_model(tokenizer, model_args, finetuning_args, training_args.do_train)
    ref_model = None
    if finetuning_args.rl_kl_coef != 0.0 and finetuning_args.finetuning_type != "lora":
        ref_model = create_ref_model(model_args, finetuning_args)

    run_config = build_run_config(
        training_args, finetuning_args, generating_args, tokenizer.eos_token_id, tools=tools_config
    )
    session = open_rollout_session(run_config.rollout, tokenizer, tools=executor, model=model,
                                   tool_protocol=finetuning_args.agentic_tool_protocol, template=template)  # fmt: skip
    reward_fn = reward_from_args(finetuning_args, training_args.output_dir)  # agentic_reward(_funcs), judge

    # the reward-gaming monitor (docs/plan.md §2) goes first: LogCallback writes the record it annotates
    callbacks = [GamingMonitorCallback(tool_bonus=run_config.reward_tool_bonus), *(callbacks or [])]
    extend_log_callback(callbacks)
    trainer = ArpoTrainer(
        model=model,
        args=run_config.grpo,
        rollout=session,
        reward_fn=reward_fn,
        loss_config=run_config.loss,
        processing_class=tokenizer,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        ref_model=ref_model,
        callbacks=callbacks,
    )

    if training_args.do_train:
        train_result = trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
        trainer.save_model()
        trainer.log_metrics("train", train_result.metrics)
        trainer.save_metrics("train", train_result.metrics)
        trainer.save_state()
        if trainer.is_world_process_zero() and finetuning_args.plot_loss:
            plot_loss(training_args.output_dir, keys=list(PLOT_KEYS))

    if training_args.do_eval and eval_dataset is not None:
        metrics = trainer.evaluate(metric_key_prefix="eval")
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
