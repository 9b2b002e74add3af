# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""ArpoTrainer plumbing on a hand-built rollout: batch layout, advantages, loss mask, normalisers, AEPO == ARPO."""

import copy
import json

import pytest
import torch


pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from llamafactory.hparams import GeneratingArguments  # noqa: E402
from transformers import AutoModelForCausalLM, Seq2SeqTrainingArguments  # noqa: E402

from llamafactory_agentic.algorithms import compute_grpo_advantages, entropy_from_logits, low_var_kl  # noqa: E402
from llamafactory_agentic.rewards import get_reward_function  # noqa: E402
from llamafactory_agentic.tools import BaseTool, ToolCall, ToolExecutor, ToolOutput  # noqa: E402
from llamafactory_agentic.train.arpo.config import (  # noqa: E402
    ArpoLossConfig,
    build_grpo_config,
    derive_steps_per_generation,
)
from llamafactory_agentic.train.arpo.trainer import ArpoTrainer  # noqa: E402
from llamafactory_agentic.train.presets import PRESETS, resolve_presets  # noqa: E402

from ._helpers import OBSERVATION, THINK, ScriptedRollout, agentic_args, make_rows  # noqa: E402


M = 4


def make_trainer(
    tmp_path,
    model_dir,
    tokenizer,
    finetuning_args,
    *,
    rollout_prompts=2,
    batch=2,
    accum=2,
    max_steps=1,
    ref_model=None,
    reward_fn=None,
    rollout=None,
    executor=None,
    config_hook=None,
):
    resolve_presets(finetuning_args, verbose=False)
    finetuning_args.arpo_rollout_n = M
    finetuning_args.arpo_initial_rollouts = 2
    finetuning_args.arpo_rollout_batch_size = rollout_prompts
    training_args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accum,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        max_steps=max_steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=7,
    )
    generating_args = GeneratingArguments(temperature=1.0, top_p=1.0, top_k=0)
    config = build_grpo_config(training_args, finetuning_args, generating_args, world_size=1)
    if config_hook is not None:
        config_hook(config)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    rows = make_rows(tokenizer, 4)
    return ArpoTrainer(
        model=model,
        args=config,
        rollout=rollout if rollout is not None else ScriptedRollout(tokenizer),
        reward_fn=reward_fn if reward_fn is not None else get_reward_function("f1"),
        loss_config=ArpoLossConfig.from_args(finetuning_args),
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(rows),
        ref_model=ref_model,
        executor=executor,
    )


def trl_generation_batch(tokenizer, num_prompts):
    rows = make_rows(tokenizer, num_prompts)
    return [row for row in rows for _ in range(M)]  # RepeatSampler layout: M consecutive copies


def test_steps_per_generation_reference_geometry():
    # docs/algorithms.md §10: 128 prompts x 16 per rollout, 16 prompts (256 trajectories) per update -> 8 updates
    spg = derive_steps_per_generation(
        128, 16, per_device_train_batch_size=4, gradient_accumulation_steps=8, world_size=8
    )
    assert spg == 64 and spg // 8 == 8
    with pytest.raises(ValueError, match="multiple"):
        derive_steps_per_generation(3, 4, per_device_train_batch_size=2, gradient_accumulation_steps=4, world_size=1)


def test_generation_batch_layout_advantages_and_masks(tmp_path, tiny_model_dir, tiny_tokenizer):
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"))
    assert trainer.args.steps_per_generation == 4 and trainer.num_generations == M
    batches = trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))
    assert len(batches) == 4 and all(b["completion_ids"].shape[0] == 2 for b in batches)

    # rewards: correct (1.0), branch answering wrongly (0), wrong (0), no format (-1); one rollout call, 2 prompts
    rewards = torch.tensor([1.0, 0.0, 0.0, -1.0] * 2)
    expected_adv = compute_grpo_advantages(rewards, torch.tensor([0] * 4 + [1] * 4))
    got_adv = torch.stack(
        [
            b["advantages"][i].max() if expected_adv[k] >= 0 else b["advantages"][i].min()
            for k, (b, i) in enumerate((b, i) for b in batches for i in range(2))
        ]
    )
    torch.testing.assert_close(got_adv, expected_adv)
    assert trainer.session.agent.calls == [(2, True)]

    obs_len = len(tiny_tokenizer.encode(OBSERVATION, add_special_tokens=False))
    start = len(tiny_tokenizer.encode(THINK, add_special_tokens=False))
    first = batches[0]  # group 0 members 0 and 1: both contain the observation
    for i in range(2):
        assert first["loss_mask"][i, start : start + obs_len].sum() == 0  # observation never trained
        assert first["completion_mask"][i, start : start + obs_len].all()  # ... but attended
        assert first["advantages"][i, start : start + obs_len].abs().sum() == 0

    # normaliser = loss-mask tokens of the whole optimiser update (micro-batches 0-1 -> update 0 = group 0)
    update0 = sum(int(b["loss_mask"].sum()) for b in batches[:2])
    update1 = sum(int(b["loss_mask"].sum()) for b in batches[2:])
    assert [int(b["num_items_in_batch"]) for b in batches] == [update0, update0, update1, update1]
    # and its trajectories, the sequence-mean normaliser of `rl_loss_agg_mode` (docs/algorithms.md §4.8)
    assert [int(b["num_sequences_in_batch"]) for b in batches] == [4, 4, 4, 4]
    assert "old_per_token_logps" in first  # two updates per rollout: old log-probs recomputed before the first
    assert "ref_per_token_logps" not in first  # rl_kl_coef = 0: no reference model, no ref log-probs


def _manual_loss(model, batch, kl_coef, entropy_coef):
    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    width = batch["completion_ids"].shape[1]
    logits = model(
        input_ids=input_ids, attention_mask=attention, position_ids=(attention.cumsum(-1) - 1).clamp(min=0)
    ).logits
    logits = logits[:, -width - 1 : -1]
    logps = torch.log_softmax(logits.float(), -1).gather(-1, batch["completion_ids"][..., None]).squeeze(-1)
    mask = batch["loss_mask"].float()
    n = batch["num_items_in_batch"]
    ratio = torch.exp(logps - batch["old_per_token_logps"])
    adv = batch["advantages"]
    pg = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    pg = torch.where(adv < 0, torch.minimum(pg, -3.0 * adv), pg)
    loss = (pg * mask).sum() / n
    loss = loss + kl_coef * (low_var_kl(logps, batch["ref_per_token_logps"]) * mask).sum() / n
    loss = loss - entropy_coef * (entropy_from_logits(logits) * mask).sum() / n
    return loss


def test_loss_mask_gates_policy_kl_entropy_and_normaliser(tmp_path, tiny_model_dir, tiny_tokenizer):
    args = agentic_args("arpo", rl_kl_coef=0.1, rl_entropy_coef=0.01)
    ref_model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args, ref_model=ref_model)
    assert trainer.beta == 0.1 and trainer.ref_model is not None
    batches = trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))
    batch = dict(batches[0])
    assert "ref_per_token_logps" in batch  # rl_kl_coef > 0: reference log-probs computed with the rollout
    gen = torch.Generator().manual_seed(0)
    batch["ref_per_token_logps"] = batch["old_per_token_logps"] - 0.3 * torch.rand(
        batch["loss_mask"].shape, generator=gen
    )
    batch["old_per_token_logps"] = batch["old_per_token_logps"] + 0.1 * torch.randn(
        batch["loss_mask"].shape, generator=gen
    )

    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, batch)
    expected = _manual_loss(trainer.model, batch, 0.1, 0.01)
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)

    # garbage at masked positions (observations, padding) changes nothing: loss and gradients
    loss.backward()
    grads = [p.grad.clone() for p in trainer.model.parameters()]
    trainer.model.zero_grad()
    poisoned = dict(batch)
    off = batch["loss_mask"] == 0
    assert off.any()
    poisoned["advantages"] = torch.where(off, torch.full_like(batch["advantages"], 1e3), batch["advantages"])
    poisoned["old_per_token_logps"] = torch.where(off, batch["old_per_token_logps"] - 50, batch["old_per_token_logps"])
    poisoned["ref_per_token_logps"] = torch.where(off, batch["ref_per_token_logps"] + 50, batch["ref_per_token_logps"])
    loss2 = trainer._compute_loss(trainer.model, poisoned)
    loss2.backward()
    assert torch.equal(loss, loss2)
    for g, p in zip(grads, trainer.model.parameters()):
        assert torch.equal(g, p.grad)
    assert trainer._metrics["train"]["loss/kl"] and trainer._metrics["train"]["aepo/trained_entropy_p90"]


def _train_once(tmp_path, model_dir, tokenizer, finetuning_args):
    trainer = make_trainer(tmp_path, model_dir, tokenizer, finetuning_args, max_steps=2)
    torch.manual_seed(0)
    trainer.train()
    params = [p.detach().clone() for p in trainer.model.parameters()]
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return trainer, params, losses


@pytest.mark.slow
def test_aepo_with_arpo_values_reproduces_arpo_exactly(tmp_path, tiny_model_dir, tiny_tokenizer):
    arpo_values = dict(PRESETS["arpo"])
    arpo_trainer, arpo_params, arpo_losses = _train_once(
        tmp_path / "arpo", tiny_model_dir, tiny_tokenizer, agentic_args("arpo")
    )
    aepo_args = agentic_args("aepo", **arpo_values)
    aepo_trainer, aepo_params, aepo_losses = _train_once(tmp_path / "aepo", tiny_model_dir, tiny_tokenizer, aepo_args)
    assert aepo_trainer.loss_config == arpo_trainer.loss_config
    assert len(arpo_losses) == 2 and arpo_losses == aepo_losses
    for a, b in zip(arpo_params, aepo_params):
        assert torch.equal(a, b)
    # two optimiser updates from one rollout moved the weights
    fresh = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    assert any(not torch.equal(a, b.detach()) for a, b in zip(arpo_params, fresh.parameters()))
    assert arpo_trainer.session.agent.calls == [(2, True)]

    # the released AEPO preset really changes the loss configuration (balanced clip on)
    released = agentic_args("aepo")
    resolve_presets(released, verbose=False)
    assert ArpoLossConfig.from_args(released).balanced_clip is True


@pytest.mark.slow
def test_metrics_reach_logs_and_rollout_log(tmp_path, tiny_model_dir, tiny_tokenizer):
    args = agentic_args("arpo", arpo_rollout_log_ratio=1.0)
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args, max_steps=1)
    trainer.train()
    record = trainer.state.log_history[0]
    for key in (
        "reward/mean",
        "reward/std",
        "reward/accuracy",
        "rollout/tool_calls_per_traj",
        "rollout/branches",
        "rollout/trained_tokens",
        "rollout/observation_tokens",
        "rollout/delta_h_mean",
        "time/generation",
        "time/reward",
        "time/training",
        "time/step",
        "loss/clip_frac",
        "aepo/grad_preserved_frac",
        "aepo/trained_entropy_p90",
        "aepo/global_samples_per_group",
    ):
        assert key in record, key
    # the whole optimiser step: this step's rollout and its forward/backward are inside it
    assert record["time/step"] >= record["time/step_rollout_total"] + record["time/training"] > 0
    assert record["reward/accuracy"] == pytest.approx(0.25)
    lines = (tmp_path / "rollouts.jsonl").read_text().splitlines()
    group = json.loads(lines[0])
    assert len(group["trajectories"]) == M
    branch = group["trajectories"][1]
    assert branch["parent"] == 0 and branch["branch_pos"] > 0 and branch["branch_call_index"] == 1
    assert branch["observation_spans"] and "<result>" in branch["response"]


def test_validation_is_greedy_single_trajectory(tmp_path, tiny_model_dir, tiny_tokenizer):
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"))
    trainer.args.per_device_eval_batch_size = 3
    metrics = trainer.evaluate(Dataset.from_list(make_rows(tiny_tokenizer, 3)))
    assert trainer.session.agent.calls == [(3, False)]
    assert metrics["eval_reward/mean"] == pytest.approx(1.0) and metrics["eval_reward/accuracy"] == pytest.approx(1.0)


def test_hard_attribution_shares_prefix_advantage(tmp_path, tiny_model_dir, tiny_tokenizer):
    args = agentic_args("arpo", arpo_advantage_attribution="hard")
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args)
    batch = trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))[0]
    adv = compute_grpo_advantages(torch.tensor([1.0, 0.0, 0.0, -1.0]), torch.zeros(4, dtype=torch.long))
    prefix = len(tiny_tokenizer.encode(THINK, add_special_tokens=False))  # sampled tokens before the observation
    shared = (adv[0] + adv[1]) / 2  # member 1 is a branch of member 0 copied after the observation
    torch.testing.assert_close(batch["advantages"][:, :prefix], torch.full((2, prefix), float(shared)))
    tail = batch["loss_mask"][0].nonzero().max()  # member 0's own EOS keeps its own advantage
    torch.testing.assert_close(batch["advantages"][0, tail], adv[0])


# ---------------------------------------------------------------------------------------------- reviewer fixes


def test_rollout_batch_must_split_over_ranks():
    # 3 prompts x 4 = 12 trajectories fill 6 updates of 2 on 2 ranks, but rank 1 would roll out 1 group, rank 0 two
    # (and with 1 prompt on 2 ranks one rank would have none and skip the ZeRO-3 gather collective -> hang)
    for prompts, world in ((3, 2), (1, 2), (6, 4)):
        with pytest.raises(ValueError, match=rf"arpo_rollout_batch_size \({prompts}\).*world size \({world}\)"):
            derive_steps_per_generation(prompts, 4, per_device_train_batch_size=1, gradient_accumulation_steps=1,
                                        world_size=world)  # fmt: skip
    assert derive_steps_per_generation(4, 4, 1, 1, 2) == 8
    args = agentic_args("arpo")
    resolve_presets(args, verbose=False)
    args.arpo_rollout_batch_size, args.arpo_rollout_n = 3, 4
    training_args = Seq2SeqTrainingArguments(output_dir="unused", per_device_train_batch_size=1, report_to=[])
    with pytest.raises(ValueError, match="multiple of the world size"):
        build_grpo_config(training_args, args, GeneratingArguments(), world_size=2)


def test_ds3_gather_off_is_refused_with_the_hf_backend(tmp_path, tiny_model_dir, tiny_tokenizer):
    def gather_off(config):
        config.ds3_gather_for_generation = False

    with pytest.raises(ValueError, match="ds3_gather_for_generation"):
        make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), config_hook=gather_off)


def test_a_rank_without_groups_still_enters_the_generation_collective(
    tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch
):
    # stands in for 2 ranks (no process group on CPU): rank 1 of 2 with a single group has nothing to roll out
    import contextlib
    from types import SimpleNamespace

    from llamafactory_agentic.train.arpo import pipeline as pipeline_module

    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"))
    entered = []

    @contextlib.contextmanager
    def fake_unwrap(model, accelerator, gather_deepspeed3_params=True):
        entered.append(gather_deepspeed3_params)  # ZeRO-3 enters a collective here on every rank
        yield trainer.accelerator.unwrap_model(model)

    monkeypatch.setattr(pipeline_module, "unwrap_model_for_generation", fake_unwrap)
    monkeypatch.setattr(pipeline_module, "gather_object", lambda obj: obj)
    # the step reads its accelerator from its StepContext (issue 36), not from the trainer
    monkeypatch.setattr(trainer.step.ctx, "accelerator", SimpleNamespace(num_processes=2, process_index=1,
                                                                         unwrap_model=trainer.accelerator.unwrap_model))  # fmt: skip
    records = trainer.step.roll_out_and_score(make_rows(tiny_tokenizer, 1), training=True).records
    assert records == [] and trainer.session.agent.calls == []  # nothing rolled out on this rank ...
    assert entered == [True]  # ... but the gather was entered like on rank 0


def test_kl_and_entropy_bonus_metrics_are_local_token_means(tmp_path, tiny_model_dir, tiny_tokenizer):
    args = agentic_args("arpo", rl_kl_coef=0.1, rl_entropy_coef=0.01)
    ref_model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args, ref_model=ref_model, accum=2)
    batch = dict(trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))[0])
    gen = torch.Generator().manual_seed(1)
    batch["ref_per_token_logps"] = batch["old_per_token_logps"] - 0.5 * torch.rand(
        batch["loss_mask"].shape, generator=gen
    )
    # the update's normaliser covers both accumulation steps: it must not leak into the metric
    assert float(batch["num_items_in_batch"]) > float(batch["loss_mask"].sum())
    trainer.model.train()
    trainer._metrics["train"].clear()
    trainer._compute_loss(trainer.model, batch)

    input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    width = batch["completion_ids"].shape[1]
    with torch.no_grad():
        logits = trainer.model(
            input_ids=input_ids, attention_mask=attention, position_ids=(attention.cumsum(-1) - 1).clamp(min=0)
        ).logits[:, -width - 1 : -1]
    logps = torch.log_softmax(logits.float(), -1).gather(-1, batch["completion_ids"][..., None]).squeeze(-1)
    mask = batch["loss_mask"].bool()
    expected_kl = low_var_kl(logps, batch["ref_per_token_logps"])[mask].mean()
    expected_entropy = entropy_from_logits(logits)[mask].mean()
    assert trainer._metrics["train"]["loss/kl"][-1] == pytest.approx(float(expected_kl), rel=1e-4)
    assert trainer._metrics["train"]["loss/entropy_bonus_term"][-1] == pytest.approx(float(expected_entropy), rel=1e-4)


def _write_reward_module(tmp_path, monkeypatch):
    (tmp_path / "trainer_user_reward_mod.py").write_text(
        "from llamafactory_agentic.rewards import get_reward_function\n\n"
        "_F1 = get_reward_function('f1')\n\n\n"
        "def f1_as_number(model_text, ground_truth, metadata):\n"
        "    return _F1(model_text, ground_truth, metadata)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_user_reward_reports_accuracy_and_format_rate(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    _write_reward_module(tmp_path, monkeypatch)
    import trainer_user_reward_mod

    for reward_fn in (
        get_reward_function("trainer_user_reward_mod:f1_as_number"),
        trainer_user_reward_mod.f1_as_number,
    ):
        trainer = make_trainer(
            tmp_path / "out", tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), reward_fn=reward_fn
        )
        trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))
        metrics = trainer._metrics["train"]
        # rewards per group: 1.0 (correct), 0 (wrong), 0 (wrong), -1 (no format)
        assert metrics["reward/mean"][-1] == pytest.approx(0.0)
        assert metrics["reward/accuracy"][-1] == pytest.approx(0.25)
        assert metrics["reward/format_ok_rate"][-1] == pytest.approx(0.75)


def test_rollout_log_advantage_is_the_mean_over_trained_tokens(tmp_path, tiny_model_dir, tiny_tokenizer):
    args = agentic_args("arpo", arpo_rollout_log_ratio=1.0)
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args)
    trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))
    expected = compute_grpo_advantages(torch.tensor([1.0, 0.0, 0.0, -1.0]), torch.zeros(4, dtype=torch.long))
    for line in (tmp_path / "rollouts.jsonl").read_text().splitlines():
        members = json.loads(line)["trajectories"]
        assert members[0]["observation_spans"]  # observation tokens (advantage 0) must not dilute the mean
        got = torch.tensor([m["advantage"] for m in members])
        torch.testing.assert_close(got, expected)  # soft attribution: one advantage on every trained token


def test_greedy_training_is_refused():
    from types import SimpleNamespace

    from llamafactory_agentic.train.arpo.config import check_rl_sampling
    from llamafactory_agentic.train.arpo.workflow import run_arpo

    check_rl_sampling(GeneratingArguments(do_sample=True, temperature=1.0))
    for bad in (GeneratingArguments(do_sample=False), GeneratingArguments(temperature=0.0)):
        with pytest.raises(ValueError, match="do_sample.*temperature"):
            check_rl_sampling(bad)
        # the workflow refuses before loading anything (the other arguments are never read)
        with pytest.raises(ValueError, match="do_sample.*temperature"):
            run_arpo(None, None, SimpleNamespace(do_train=True), None, bad)
        args = agentic_args("arpo")
        resolve_presets(args, verbose=False)
        args.arpo_rollout_batch_size = 1
        training_args = Seq2SeqTrainingArguments(output_dir="unused", do_train=True, report_to=[])
        with pytest.raises(ValueError, match="do_sample.*temperature"):
            build_grpo_config(training_args, args, bad, world_size=1)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [0, 1024])
def test_loss_entropy_without_grad_unless_the_bonus_needs_it(
    tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch, chunk
):
    from llamafactory_agentic.algorithms import entropy_from_logits_chunked
    from llamafactory_agentic.train.arpo import pipeline as pipeline_module

    seen = []

    def spy_full(logits, *a, **k):  # materialising path (rl_logprob_chunk_size: 0)
        seen.append((torch.is_grad_enabled(), logits.requires_grad))
        return entropy_from_logits_chunked(logits, *a, **k)

    real_fused = pipeline_module.response_log_probs

    def spy_fused(*a, **k):  # fused path: the returned entropy carries a graph only with the bonus
        logps, entropy = real_fused(*a, **k)
        if k["with_entropy"]:  # (the old-log-prob pass of the rollout asks for none)
            seen.append((k["entropy_grad"], entropy.requires_grad))
        return logps, entropy

    monkeypatch.setattr(pipeline_module, "entropy_from_logits_chunked", spy_full)
    monkeypatch.setattr(pipeline_module, "response_log_probs", spy_fused)
    for stage, overrides, grad in (
        ("arpo", {}, False),  # plain ARPO: only the loss/entropy metric
        ("aepo", {}, False),  # released AEPO preset: entropy used detached
        ("aepo", {"aepo_entropy_advantage": True, "aepo_balanced_clip_scope": "high_entropy"}, False),
        ("arpo", {"rl_entropy_coef": 0.01}, True),  # entropy bonus: differentiable
    ):
        args = agentic_args(stage, rl_logprob_chunk_size=chunk, **overrides)
        trainer = make_trainer(tmp_path / stage, tiny_model_dir, tiny_tokenizer, args)
        batch = trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))[0]
        trainer.model.train()
        seen.clear()
        trainer._metrics["train"].clear()
        trainer._compute_loss(trainer.model, batch)
        assert seen == [(grad, grad)], (stage, overrides)
        assert trainer._metrics["train"]["loss/entropy"][-1] > 0


class _Echo(BaseTool):
    """Test tool: echoes its argument (stands in for search/python, which are not what is tested here)."""

    name = "echo"
    default_tag = "echo"

    def run(self, args):
        return ToolOutput(f"echo: {args}")


class _ToolCallingRollout(ScriptedRollout):
    """ScriptedRollout whose validation pass calls the executor once per prompt (training calls no tool)."""

    def __init__(self, tokenizer, executor):
        super().__init__(tokenizer)
        self.executor = executor

    def rollout(self, prompts, training=True):
        if not training:
            self.executor.execute([ToolCall("echo", f"prompt {i}") for i in range(len(prompts))])
        return super().rollout(prompts, training)


@pytest.mark.slow
def test_validation_tool_metrics_do_not_leak_into_training(tmp_path, tiny_model_dir, tiny_tokenizer):
    with ToolExecutor([_Echo()], workers=2) as executor:
        rollout = _ToolCallingRollout(tiny_tokenizer, executor)
        trainer = make_trainer(
            tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), rollout=rollout, executor=executor
        )
        trainer.args.per_device_eval_batch_size = 2
        metrics = trainer.evaluate(Dataset.from_list(make_rows(tiny_tokenizer, 3)))
        assert metrics["eval_tools/echo/calls"] == 3.0 and metrics["eval_tools/echo/backend_calls"] == 3.0
        trainer.train()
        train_logs = [h for h in trainer.state.log_history if "loss" in h]
        assert train_logs and all(h.get("tools/echo/calls", 0.0) == 0.0 for h in train_logs)


def test_validation_counts_each_prompt_once(tmp_path, tiny_model_dir, tiny_tokenizer):
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"))
    rows = make_rows(tiny_tokenizer, 3)
    rows[1]["_ground_truth"] = rows[2]["_ground_truth"] = "5"  # the scripted answer 3 is right only for row 0
    dataset = Dataset.from_list(rows)
    loaded = [row for batch in trainer.get_eval_dataloader(dataset) for row in batch]
    assert [row["_eval_index"] for row in loaded] == [0, 1, 2]
    # Accelerate's even_batches pads the last batch of a rank with the first prompts again: row 0 twice
    batches = [loaded[:2], [loaded[2], loaded[0]]]
    metrics = trainer.evaluation_loop(batches, "Evaluation").metrics
    assert metrics["eval_reward/mean"] == pytest.approx(1 / 3)
    assert metrics["eval_reward/accuracy"] == pytest.approx(1 / 3)
    assert trainer.session.agent.calls == [(2, False), (2, False)]


def test_rollout_random_draws_survive_a_checkpoint_round_trip():
    """Branching draws, engine sampling and the rollouts.jsonl sampler resume where they were (not from the seed)."""
    import json
    import random
    from types import SimpleNamespace

    import numpy as np
    import torch

    from llamafactory_agentic.rollout.rng_state import rollout_rng_state, set_rollout_rng_state

    generator = torch.Generator().manual_seed(3)
    rollout = SimpleNamespace(rng=np.random.default_rng(7), engine=SimpleNamespace(_generator=generator))
    log_rng = random.Random(11)
    for _ in range(5):  # advance every generator as a few training steps would
        rollout.rng.random(), torch.rand(2, generator=generator), log_rng.random()

    saved = json.loads(json.dumps(rollout_rng_state(rollout, log_rng)))  # what the checkpoint file holds
    expected = (rollout.rng.random(), torch.rand(3, generator=generator).tolist(), log_rng.random())

    fresh_generator = torch.Generator().manual_seed(3)
    resumed = SimpleNamespace(rng=np.random.default_rng(7), engine=SimpleNamespace(_generator=fresh_generator))
    resumed_log = random.Random(11)
    set_rollout_rng_state(resumed, resumed_log, saved)
    got = (resumed.rng.random(), torch.rand(3, generator=fresh_generator).tolist(), resumed_log.random())
    assert got == expected


class _CountingRollout(ScriptedRollout):
    """ScriptedRollout whose `rollout/rounds` metric is the call number (1, 2, ...)."""

    def rollout(self, prompts, training=True):
        output = super().rollout(prompts, training)
        output.metrics["rollout/rounds"] = float(len(self.calls))
        return output


@pytest.mark.slow
def test_rollout_metrics_of_every_rollout_in_a_logging_window_are_averaged(tmp_path, tiny_model_dir, tiny_tokenizer):
    # one prompt x M = 4 trajectories per rollout = one optimiser update: two rollouts before the first log
    def log_every_two_steps(config):
        config.logging_steps = 2

    trainer = make_trainer(
        tmp_path,
        tiny_model_dir,
        tiny_tokenizer,
        agentic_args("arpo"),
        rollout_prompts=1,
        max_steps=2,
        rollout=_CountingRollout(tiny_tokenizer),
        config_hook=log_every_two_steps,
    )
    trainer.train()
    assert trainer.session.agent.calls == [(1, True), (1, True)]
    record = next(h for h in trainer.state.log_history if "loss" in h)
    assert record["rollout/rounds"] == pytest.approx(1.5)  # not the first rollout's 1.0 only


@pytest.mark.slow
def test_the_policy_loss_is_selected_by_name_through_the_registry(tmp_path, tiny_model_dir, tiny_tokenizer):
    from llamafactory_agentic.algorithms import ppo_clip_loss, register_policy_loss, registry

    calls = []

    @register_policy_loss("test_doubled_ppo_clip")
    def doubled(log_probs, old_log_probs, advantages, loss_mask, config, **kwargs):
        calls.append((type(config).__name__, sorted(kwargs)))
        loss, metrics = ppo_clip_loss(log_probs, old_log_probs, advantages, loss_mask, config, **kwargs)
        return 2 * loss, metrics

    try:
        trainers, losses = {}, {}
        for name in ("ppo_clip", "test_doubled_ppo_clip"):
            args = agentic_args("arpo", rl_policy_loss=name)
            trainers[name] = make_trainer(tmp_path / name, tiny_model_dir, tiny_tokenizer, args, max_steps=1)
            torch.manual_seed(0)
            trainers[name].train()
            losses[name] = [h["loss"] for h in trainers[name].state.log_history if "loss" in h]
        # a training run went through the registered function, with the run's config object
        assert len(calls) == 2 and calls[0] == ("ArpoLossConfig", ["balanced_clip_mask", "num_tokens"])
        assert losses["test_doubled_ppo_clip"][0] == pytest.approx(2 * losses["ppo_clip"][0], rel=1e-3, abs=2e-4)
        assert losses["ppo_clip"][0] != 0.0

        # the same micro-batch through both trainers: exactly twice the built-in loss
        batch = trainers["ppo_clip"]._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))[0]
        model = trainers["ppo_clip"].model
        model.eval()
        with torch.no_grad():
            base = trainers["ppo_clip"]._compute_loss(model, batch)
            custom = trainers["test_doubled_ppo_clip"]._compute_loss(model, batch)
        assert torch.equal(custom, 2 * base)
    finally:
        registry._POLICY_LOSSES.pop("test_doubled_ppo_clip", None)

    args = agentic_args("arpo", rl_policy_loss="test_doubled_ppo_clip")  # no longer registered
    resolve_presets(args, verbose=False)
    with pytest.raises(ValueError, match=r"Unknown `rl_policy_loss` 'test_doubled_ppo_clip'.*'ppo_clip'"):
        ArpoLossConfig.from_args(args)


def test_a_checkpoint_without_the_rollout_rng_file_is_reported_through_llamafactorys_logger(
    tmp_path, tiny_model_dir, tiny_tokenizer
):
    import logging

    from llamafactory.extras import logging as llamafactory_logging

    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"))
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    llamafactory_logging.add_handler(handler)  # where LLaMA-Board attaches its running-log handler
    try:
        trainer._load_rng_state(str(tmp_path / "checkpoint-1"))
    finally:
        llamafactory_logging.remove_handler(handler)
    (record,) = [r for r in records if "rollout_rng_state_0.json" in r.getMessage()]
    assert record.levelno == logging.WARNING and record.name == "llamafactory.llamafactory_agentic.train.arpo.trainer"


class _FlatFirstRollout(ScriptedRollout):
    """ScriptedRollout whose first call returns equal-reward groups (four copies of the correct trajectory); later
    calls return the scripted mixed groups. The prompts of every call are kept."""

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        self.prompts = []

    def rollout(self, prompts, training=True):
        self.prompts.append([list(p) for p in prompts])
        output = super().rollout(prompts, training)
        if training and len(self.calls) == 1:
            output.groups = [[copy.deepcopy(group[0]) for _ in range(M)] for group in output.groups]
        return output


@pytest.mark.slow
@pytest.mark.parametrize("max_batches", [3, 1])
def test_dynamic_sampling_replaces_equal_reward_groups_with_extra_prompts(
    tmp_path, tiny_model_dir, tiny_tokenizer, max_batches
):
    args = agentic_args("arpo", rl_dynamic_sampling=True, rl_dynamic_sampling_max_batches=max_batches)
    rollout = _FlatFirstRollout(tiny_tokenizer)
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args, rollout=rollout, max_steps=1)
    trainer.train()
    record = next(h for h in trainer.state.log_history if "loss" in h)
    advantages = torch.cat([mb["advantages"].flatten() for mb in trainer._buffered_inputs])
    assert record["reward/identical_groups"] == pytest.approx(1.0 if max_batches == 1 else 0.5)  # of all sampled
    if max_batches == 1:  # no extra batch allowed: the equal-reward groups fill the update, nothing is learned
        assert rollout.calls == [(2, True)]
        assert record["dynamic_sampling/filled_groups"] == 2.0
        assert record["dynamic_sampling/identical_groups_in_update"] == 1.0
        assert record["dynamic_sampling/dropped_groups"] == 0.0
        assert torch.count_nonzero(advantages) == 0
        return
    # the first batch had no signal: one extra batch of 2 prompts drawn from the training set, both kept
    assert rollout.calls == [(2, True), (2, True)]
    dataset_prompts = [list(row["prompt_ids"]) for row in make_rows(tiny_tokenizer, 4)]
    assert all(p in dataset_prompts for p in rollout.prompts[1])
    assert record["dynamic_sampling/generation_batches"] == 2.0
    assert record["dynamic_sampling/groups_rolled_out"] == 4.0
    assert record["dynamic_sampling/dropped_groups"] == 2.0
    assert record["dynamic_sampling/filled_groups"] == 0.0
    assert record["dynamic_sampling/identical_groups_in_update"] == 0.0
    # every group of the update has different rewards, so each group has non-zero advantages
    per_group = advantages.view(2, -1).abs().sum(dim=1)
    assert bool((per_group > 0).all())


@pytest.mark.slow
def test_dynamic_sampling_is_off_by_default_and_refuses_zero_batches(tmp_path, tiny_model_dir, tiny_tokenizer):
    rollout = _FlatFirstRollout(tiny_tokenizer)
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), rollout=rollout)
    trainer.train()
    assert rollout.calls == [(2, True)]
    assert not any(k.startswith("dynamic_sampling/") for h in trainer.state.log_history for k in h)
    args = agentic_args("arpo", rl_dynamic_sampling=True, rl_dynamic_sampling_max_batches=0)
    resolve_presets(args, verbose=False)
    with pytest.raises(ValueError, match="rl_dynamic_sampling_max_batches must be >= 1"):
        ArpoLossConfig.from_args(args)
