# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Micro-batches cut by tokens (`rl_micro_batch_tokens`), the fused log-prob path and the memory split of a step."""

import pytest
import torch


pytest.importorskip("trl")

from transformers import AutoModelForCausalLM  # noqa: E402

from llamafactory_agentic.testing import real_size_config  # noqa: E402
from llamafactory_agentic.train.arpo.batch import padded_tokens, token_micro_batches  # noqa: E402
from llamafactory_agentic.train.arpo.config import default_loss_config  # noqa: E402
from llamafactory_agentic.train.arpo.memory import (  # noqa: E402
    ModelShape,
    estimate_step_memory,
    training_state_bytes,
    unique_bytes,
)

from ._helpers import agentic_args  # noqa: E402
from .test_arpo_trainer import make_trainer, trl_generation_batch  # noqa: E402


# ------------------------------------------------------------------------------------------------ packing
def test_token_micro_batches_respect_the_cap_and_keep_every_row_once():
    lengths = [(10, 100), (12, 5), (10, 300), (8, 50), (10, 100), (30, 900), (5, 1)]
    batches = token_micro_batches(lengths, 400)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        assert padded_tokens([lengths[i] for i in b]) <= 400 or len(b) == 1  # a lone over-long row is allowed
    assert [5] in batches  # 930 tokens: alone
    # exact counts: the largest multi-row micro-batches are split
    for count in range(len(batches), len(lengths) + 1):
        exact = token_micro_batches(lengths, 400, count)
        assert len(exact) == count and all(exact)
        assert sorted(i for b in exact for i in b) == list(range(len(lengths)))
    with pytest.raises(ValueError, match="do not fit"):
        token_micro_batches(lengths, 400, len(batches) - 1)
    with pytest.raises(ValueError, match="cannot make"):
        token_micro_batches(lengths, 400, len(lengths) + 1)
    with pytest.raises(ValueError, match="max_tokens"):
        token_micro_batches(lengths, 0)


# ------------------------------------------------------------------------------------------------ equivalence
def _grads(model):
    return [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def _update0_grads(trainer, items, token_mode):
    trainer.model.train()
    trainer.model.zero_grad()
    total = 0.0
    batches = items[0]["micro_batches"] if token_mode else items[:2]  # trajectory cut: A = 2 micro-steps per update
    for batch in batches:
        loss = trainer._compute_loss(trainer.model, batch)
        loss.backward()
        total += float(loss.detach())
    return total, _grads(trainer.model)


@pytest.mark.slow
@pytest.mark.parametrize("cap", [1, 60, 10**6])
def test_token_cut_gives_the_loss_and_gradients_of_the_trajectory_cut(tmp_path, tiny_model_dir, tiny_tokenizer, cap):
    base = make_trainer(tmp_path / "traj", tiny_model_dir, tiny_tokenizer, agentic_args("arpo"))
    token = make_trainer(
        tmp_path / "tok", tiny_model_dir, tiny_tokenizer, agentic_args("arpo", rl_micro_batch_tokens=cap)
    )
    # the Trainer sees one micro-step per update of b x A = 4 trajectories
    assert (token.args.per_device_train_batch_size, token.args.gradient_accumulation_steps) == (4, 1)
    assert token.args.steps_per_generation == 2 and base.args.steps_per_generation == 4
    rows = trl_generation_batch(tiny_tokenizer, 2)
    base_items = base._generate_and_score_completions(rows)
    token_items = token._generate_and_score_completions(rows)
    assert len(token_items) == 2
    counts = [len(item["micro_batches"]) for item in token_items]
    if cap == 1:
        assert counts == [4, 4]  # one trajectory per micro-batch
    if cap == 10**6:
        assert counts == [1, 1]
    for item in token_items:
        for mb in item["micro_batches"]:
            assert "old_per_token_logps" in mb  # two updates per rollout: old log-probs as in the trajectory cut
    loss_a, grads_a = _update0_grads(base, base_items, token_mode=False)
    loss_b, grads_b = _update0_grads(token, token_items, token_mode=True)
    # same rows per update and the same global normaliser; only the summation order of the micro-batches differs
    assert loss_b == pytest.approx(loss_a, rel=1e-5, abs=1e-7)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_token_cut_training_matches_the_trajectory_cut(tmp_path, tiny_model_dir, tiny_tokenizer):
    def train(path, **overrides):
        trainer = make_trainer(path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo", **overrides), max_steps=2)
        torch.manual_seed(0)
        trainer.train()
        losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
        return trainer, [p.detach().clone() for p in trainer.model.parameters()], losses

    base, params_a, losses_a = train(tmp_path / "traj")
    token, params_b, losses_b = train(tmp_path / "tok", rl_micro_batch_tokens=60)
    assert token.state.global_step == base.state.global_step == 2
    assert losses_b == pytest.approx(losses_a, rel=1e-4, abs=1e-6)
    for a, b in zip(params_a, params_b):  # two AdamW steps at lr 1e-2 amplify float32 summation-order noise
        torch.testing.assert_close(b, a, rtol=1e-4, atol=2e-5)
    logged = [h for h in token.state.log_history if "train/micro_batches_per_update" in h]
    assert logged and logged[0]["train/micro_batches_per_update"] > 1


def test_every_rank_runs_the_same_number_of_micro_batches(tmp_path, tiny_model_dir, tiny_tokenizer, monkeypatch):
    # stands in for 2 ranks (no process group on CPU): each rank builds its items from the gathered trajectories
    from types import SimpleNamespace

    from llamafactory_agentic.train.arpo.batch import token_advantages

    cap = 140
    trainer = make_trainer(
        tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo", rl_micro_batch_tokens=cap), batch=1, accum=2
    )
    rows = trl_generation_batch(tiny_tokenizer, 2)
    records = trainer.step.roll_out_and_score(
        [rows[0], rows[4]], training=True
    ).records  # 2 groups x M = 4 trajectories
    for rec, adv, mask in zip(records, *token_advantages(records, default_loss_config())):
        rec.token_advantages, rec.loss_mask_train = adv, mask
    assert trainer.args.per_device_train_batch_size == 2  # b x A = 2 trajectories per rank and update
    # the step reads its geometry and accelerator from its StepContext (issue 36), not from the trainer
    monkeypatch.setattr(trainer.step.ctx, "steps_per_generation", 2)  # 2 ranks x 2 x 2 updates = 8 trajectories
    per_rank, greedy = [], []
    for rank in (0, 1):
        accelerator = SimpleNamespace(num_processes=2, process_index=rank, device=torch.device("cpu"))
        monkeypatch.setattr(trainer.step.ctx, "accelerator", accelerator)
        items = trainer.step.micro_batches(records).items
        per_rank.append(items)
        mine = [records[u * 4 + rank * 2 : u * 4 + rank * 2 + 2] for u in range(2)]
        greedy.append(
            [len(token_micro_batches([(len(r.prompt_ids), len(r.response_ids)) for r in m], cap)) for m in mine]
        )
    assert greedy[0] != greedy[1]  # the ranks' own cuts differ ...
    for k in range(2):  # ... but both run the larger count
        assert (
            len(per_rank[0][k]["micro_batches"])
            == len(per_rank[1][k]["micro_batches"])
            == max(greedy[0][k], greedy[1][k])
        )
        for items in per_rank:
            assert all(mb["loss_mask"].sum() > 0 for mb in items[k]["micro_batches"])


# ------------------------------------------------------------------------------------------------ memory split
def test_training_state_bytes_counts_weights_gradients_and_adamw_states(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    params = list(model.parameters())  # a tied embedding is one Parameter
    expected_weights = sum(p.numel() * p.element_size() for p in params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    split = training_state_bytes(model, optimizer)
    assert split == {"weights": expected_weights, "gradients": 0, "optimizer_states": 0}
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    split = training_state_bytes(model, optimizer)
    assert split["gradients"] == expected_weights
    # exp_avg and exp_avg_sq per parameter (+ a scalar `step` tensor each)
    assert split["optimizer_states"] == 2 * expected_weights + 4 * len(params)
    shared = torch.zeros(10)
    assert unique_bytes([shared, shared[2:], None]) == 40


@pytest.mark.slow
def test_logged_memory_split_per_update(tmp_path, tiny_model_dir, tiny_tokenizer):
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, agentic_args("arpo"), max_steps=2)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "memory/weights_gib" in h]
    assert len(logs) == 2
    for h in logs:
        assert h["memory/gradients_gib"] == pytest.approx(h["memory/weights_gib"])
        assert h["memory/optimizer_states_gib"] > 2 * h["memory/weights_gib"]
        assert h["memory/static_gib"] == pytest.approx(
            h["memory/weights_gib"] + h["memory/gradients_gib"] + h["memory/optimizer_states_gib"]
        )


def test_memory_estimate_of_7b_full_fits_the_issue_bound():
    shape = ModelShape.from_config(real_size_config("qwen2.5-7b"))
    assert 7.5e9 < shape.params() < 7.7e9  # Qwen2.5-7B: 7.62B parameters
    est = estimate_step_memory(shape, "full", context=1536 + 4096, slots=64, micro_batch_tokens=16384)
    assert est.static == pytest.approx(7.62e9 * 8 / 2**30, rel=0.02)
    assert est.loss_peak <= 1.25 * est.static  # the bound the GPU run checks with the measured peaks
    lora = estimate_step_memory(
        ModelShape.from_config(real_size_config("qwen2.5-14b")), "lora", context=2000 + 6192, slots=32
    )
    assert lora.rollout_peak < 141 * 0.93  # fits one H200 during the rollout


# ------------------------------------------------------------------------------------------------ fused log-probs
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"rl_kl_coef": 0.1, "rl_entropy_coef": 0.01},  # KL and a differentiable entropy bonus
        # AEPO's entropy-aware advantage and balanced clip (the `high_entropy` clip scope thresholds z-scores, so a
        # token at the threshold may flip between the paths: its entropies are compared through the metrics instead)
        {"aepo_entropy_advantage": True, "aepo_balanced_clip": True},
    ],
)
def test_fused_log_probs_equal_the_materialised_logits(tmp_path, tiny_model_dir, tiny_tokenizer, overrides):
    ref_model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)) if overrides.get("rl_kl_coef") else None
    results = []
    for chunk in (0, 5):  # 0: the full [b, C, vocab] logits (the previous path); 5: fused, 5 positions per chunk
        trainer = make_trainer(
            tmp_path / str(chunk),
            tiny_model_dir,
            tiny_tokenizer,
            agentic_args("arpo", rl_logprob_chunk_size=chunk, **overrides),
            ref_model=ref_model,
        )
        batch = trainer._generate_and_score_completions(trl_generation_batch(tiny_tokenizer, 2))[0]
        trainer.model.train()
        torch.manual_seed(0)
        loss = trainer._compute_loss(trainer.model, batch)
        loss.backward()
        metrics = {k: v[-1] for k, v in trainer._metrics["train"].items() if k.startswith(("loss/", "aepo/"))}
        results.append((batch, loss.detach(), _grads(trainer.model), metrics))
    (full_batch, full_loss, full_grads, full_metrics), (batch, loss, grads, metrics) = results
    mask = batch["loss_mask"].bool()
    for key in ("old_per_token_logps", "ref_per_token_logps"):
        if key in batch:  # equal where trained; the fused path leaves the other positions at 0
            torch.testing.assert_close(batch[key][mask], full_batch[key][mask], rtol=1e-5, atol=1e-5)
            assert (batch[key][~mask] == 0).all()
    # AEPO's z-scores divide entropy differences (about 1e-3 nats on the random tiny model) by their std, which
    # amplifies the float32 summation-order differences of the two paths
    rtol = 5e-3 if overrides.get("aepo_entropy_advantage") else 1e-5
    torch.testing.assert_close(loss, full_loss, rtol=rtol, atol=1e-6)
    for a, b in zip(full_grads, grads):
        torch.testing.assert_close(b, a, rtol=max(rtol, 1e-4), atol=max(rtol, 1e-5) * float(a.abs().max()))
    assert metrics.keys() == full_metrics.keys()
    for key in metrics:
        assert metrics[key] == pytest.approx(full_metrics[key], rel=max(rtol, 1e-4), abs=1e-5), key


class _Allocator:
    """CPU stand-in for CUDA's allocator statistics (`max_memory_allocated` / `reset_peak_memory_stats`)."""

    def __init__(self):
        self.now = self.peak = 0

    def alloc(self, gib):
        self.now += gib * 2**30
        self.peak = max(self.peak, self.now)

    def free(self, gib):
        self.now -= gib * 2**30

    def max_memory_allocated(self, *args):
        return self.peak

    def reset_peak_memory_stats(self, *args):
        self.peak = self.now


def test_memory_tracker_keeps_the_peak_of_each_phase(monkeypatch):
    from llamafactory_agentic.train.arpo.memory import MemoryTracker

    gpu = _Allocator()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", gpu.max_memory_allocated)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", gpu.reset_peak_memory_stats)
    tracker = MemoryTracker()
    gpu.alloc(10)  # weights
    tracker.phase("rollout")
    gpu.alloc(30)  # KV cache
    gpu.free(30)  # released before training
    tracker.phase("loss")
    gpu.alloc(8)  # activations
    gpu.free(8)
    gpu.alloc(10)  # gradients stay until the optimiser step
    tracker.phase("optimizer")
    gpu.alloc(20)  # AdamW states created at the first step
    assert tracker.take() == {"rollout": 40.0, "loss": 20.0, "optimizer": 40.0}
    gpu.free(10)  # zero_grad
    tracker.phase("loss")  # next update
    gpu.alloc(2)
    assert tracker.take() == {"optimizer": 40.0, "loss": 32.0}  # the tail restarts at what was allocated
    assert tracker.overall == 40.0


def test_decode_metrics_split_device_host_and_capture():
    from llamafactory_agentic.rollout.hf_engine import decode_metrics

    before = {"decode_steps": 0, "decode_s": 0.0, "decode_device_s": 0.0, "capture_s": 0.0, "prefill_s": 0.0,
              "idle_s": 0.0, "decode_row_steps": 0, "decode_batch_steps": 0, "decode_kv_steps": 0}  # fmt: skip
    after = dict(before, decode_steps=100, decode_s=1.5, decode_device_s=1.0, capture_s=0.3, prefill_s=0.2,
                 idle_s=0.1, decode_row_steps=6000, decode_batch_steps=6400, decode_kv_steps=51200,
                 cache_bytes=2**31)  # fmt: skip
    out = decode_metrics(before, after)
    assert out["perf/decode_step_ms"] == pytest.approx(10.0)  # device time per step, capture excluded
    assert out["perf/decode_wall_ms"] == pytest.approx(12.0)
    assert out["perf/decode_host_ms"] == pytest.approx(2.0)
    assert out["perf/decode_rows"] == 60 and out["perf/decode_batch"] == 64 and out["perf/decode_kv_len"] == 512
    assert out["memory/engine_cache_gib"] == 2.0 and out["time/graph_capture"] == pytest.approx(0.3)
    assert decode_metrics(before, before) == {}
