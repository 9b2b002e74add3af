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

"""`rl_policy_loss: gspo | dr_grpo | cispo`, `rl_loss_agg_mode` and `rl_advantage_std_norm` (docs/algorithms.md §4.8).

The keys are parsed, resolved against the loss and the stage presets (ARPO and AEPO rollouts), refused in combinations
that are no named method, and reach the trainer's micro-batch loss with the update's normalisers.
"""

import pytest
import torch
from llamafactory.hparams import FinetuningArguments

from llamafactory_agentic.algorithms import register_policy_loss, registry
from llamafactory_agentic.integration.patches import build_finetuning_arguments_class
from llamafactory_agentic.train.arpo import batch
from llamafactory_agentic.train.arpo.config import default_loss_config, default_rollout_config
from llamafactory_agentic.train.arpo.pipeline import micro_batch_loss

from ._helpers import record


def test_defaults_are_unchanged():
    for preset in ("arpo", "grpo", "aepo", "aepo-paper"):
        config = default_loss_config(preset)
        assert (config.policy_loss, config.loss_agg_mode, config.advantage_std_norm) == (
            "ppo_clip",
            "token_mean",
            True,
        )


@pytest.mark.parametrize(
    ("loss", "mode", "std_norm"),
    [("gspo", "seq_mean_token_mean", True), ("dr_grpo", "seq_mean_token_sum", False), ("cispo", "token_mean", True)],
)
def test_each_loss_resolves_its_own_aggregation_and_normalisation(loss, mode, std_norm):
    config = default_loss_config(rl_policy_loss=loss)
    assert (config.loss_agg_mode, config.advantage_std_norm) == (mode, std_norm)
    assert config.max_response_length == default_rollout_config().max_response_length


def test_explicit_aggregation_keys_compose_with_ppo_clip_and_cispo():
    assert default_loss_config(rl_loss_agg_mode="seq_mean_token_mean").loss_agg_mode == "seq_mean_token_mean"
    config = default_loss_config(rl_policy_loss="cispo", rl_loss_agg_mode="seq_mean_token_sum")
    assert config.loss_agg_mode == "seq_mean_token_sum"
    assert default_loss_config(rl_advantage_std_norm=False).advantage_std_norm is False


def test_new_losses_compose_with_the_aepo_rollout():
    # dr_grpo is a PPO-clip loss: AEPO's balanced clip (on in the aepo presets) applies to it
    config = default_loss_config("aepo-paper", rl_policy_loss="dr_grpo")
    assert config.balanced_clip and config.balanced_clip_scope == "high_entropy" and config.entropy_advantage
    # gspo / cispo with AEPO's rollout and entropy-aware advantage once the balanced clip is switched off
    for loss in ("gspo", "cispo"):
        config = default_loss_config("aepo-paper", rl_policy_loss=loss, aepo_balanced_clip=False)
        assert config.policy_loss == loss and config.entropy_advantage and not config.balanced_clip
    rollout = default_rollout_config("aepo-paper")  # the rollout never reads the loss
    assert rollout.dynamic_rollouts and rollout.branch_penalty == 0.05


@pytest.mark.parametrize("loss", ["gspo", "cispo"])
def test_balanced_clip_with_gspo_or_cispo_is_refused_with_the_fix(loss):
    with pytest.raises(
        ValueError, match=rf"`rl_policy_loss: {loss}` does not implement .*`aepo_balanced_clip: false`"
    ):
        default_loss_config("aepo", rl_policy_loss=loss)


def test_combinations_that_are_no_named_method_are_refused():
    with pytest.raises(ValueError, match=r"`rl_policy_loss: gspo` aggregates by `seq_mean_token_mean`.*token_mean"):
        default_loss_config(rl_policy_loss="gspo", rl_loss_agg_mode="token_mean")
    with pytest.raises(ValueError, match=r"`rl_policy_loss: dr_grpo` aggregates by `seq_mean_token_sum`"):
        default_loss_config(rl_policy_loss="dr_grpo", rl_loss_agg_mode="seq_mean_token_mean")
    with pytest.raises(
        ValueError, match=r"dr_grpo` uses advantages without the group std.*rl_advantage_std_norm: true"
    ):
        default_loss_config(rl_policy_loss="dr_grpo", rl_advantage_std_norm=True)
    # the loss's own value stated explicitly is accepted
    assert default_loss_config(rl_policy_loss="gspo", rl_loss_agg_mode="seq_mean_token_mean").policy_loss == "gspo"


def test_the_parser_accepts_the_keys_and_refuses_an_unknown_mode():
    parser_class = build_finetuning_arguments_class(FinetuningArguments)
    args = parser_class(stage="arpo", rl_policy_loss="cispo", rl_loss_agg_mode="seq_mean_token_mean")
    assert (args.rl_policy_loss, args.rl_loss_agg_mode, args.rl_advantage_std_norm) == (
        "cispo",
        "seq_mean_token_mean",
        None,
    )
    with pytest.raises(ValueError, match="rl_loss_agg_mode"):
        parser_class(stage="arpo", rl_loss_agg_mode="seq_sum")


def test_dr_grpo_advantages_reach_the_trainer_unnormalised():
    records = [record(0, m, r, mask=(1, 1, 1)) for m, r in enumerate((1.0, 0.0, 0.0, 0.0))]
    advantages, _ = batch.token_advantages(records, default_loss_config(rl_policy_loss="dr_grpo"))
    assert [row[0] for row in advantages] == pytest.approx([0.75, -0.25, -0.25, -0.25])
    grpo, _ = batch.token_advantages(records, default_loss_config())
    assert grpo[0][0] == pytest.approx(0.75 / 0.5, rel=1e-5)  # GRPO: divided by the group std 0.5


class _FixedLogProbs:
    r"""Stands in for `PolicyScorer` to isolate the loss plumbing: fixed log-probs with a gradient, zero entropy."""

    def __init__(self, values: list[list[float]]):
        self.logps = torch.tensor(values, requires_grad=True)

    def __call__(self, model, input_ids, attention_mask, width, loss_mask, with_entropy=True, entropy_grad=False):
        return self.logps, torch.zeros_like(self.logps)


def _micro_batch(num_sequences: int):
    records = [record(0, 0, 1.0, mask=(1, 1, 1)), record(0, 1, 0.0, mask=(1, 0, 0))]
    for rec, adv in zip(records, ([1.0, 1.0, 1.0], [-2.0, 0.0, 0.0])):
        rec.token_advantages, rec.loss_mask_train = adv, list(rec.loss_mask)
    return batch.collate_records(records, num_tokens=8, pad_token_id=0, device="cpu", num_sequences=num_sequences)


@pytest.mark.parametrize(
    ("keys", "expected"),
    [
        ({}, (-3 + 2) / (8 / 2)),  # token mean over the update's 8 tokens, 2 ranks
        ({"rl_loss_agg_mode": "seq_mean_token_sum"}, (-3 + 2) / (6 / 2)),  # 6 trajectories in the update
        ({"rl_loss_agg_mode": "seq_mean_token_mean"}, (-1 + 2) / (6 / 2)),
        ({"rl_policy_loss": "gspo"}, (-1 + 2) / (6 / 2)),
        ({"rl_policy_loss": "dr_grpo"}, (-3 + 2) / (6 / 2 * 4096)),  # L_max = arpo_max_response_length
        ({"rl_policy_loss": "cispo"}, (3 * 1.0 - 2.0) / (8 / 2)),  # -w·A·l = A with l = -1, w = 1
    ],
)
def test_the_trainer_passes_the_updates_normalisers_to_the_loss(keys, expected):
    micro = _micro_batch(num_sequences=6)
    policy = _FixedLogProbs([[-1.0, -1.0, -1.0], [-1.0, -5.0, -5.0]])  # on-policy: ratio 1
    loss, _ = micro_batch_loss(policy, None, micro, default_loss_config(**keys), beta=0.0, world_size=2)
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_a_loss_registered_without_num_sequences_still_runs():
    calls = []

    @register_policy_loss("test_loss_without_num_sequences")
    def older(log_probs, old_log_probs, advantages, loss_mask, config, **kwargs):
        calls.append(sorted(kwargs))
        return (log_probs * loss_mask).sum(), {}

    try:
        config = default_loss_config(rl_policy_loss="test_loss_without_num_sequences")
        micro_batch_loss(_FixedLogProbs([[-1.0] * 3, [-1.0] * 3]), None, _micro_batch(2), config, 0.0, 1)
    finally:
        registry._POLICY_LOSSES.pop("test_loss_without_num_sequences", None)
    assert calls == [["balanced_clip_mask", "num_tokens"]]


def test_resolve_presets_derives_the_loss_keys_and_prints_them():
    from llamafactory_agentic.train.presets import format_effective_config, resolve_presets

    from ._helpers import agentic_args

    args = agentic_args("arpo", rl_policy_loss="dr_grpo")
    result = resolve_presets(args, verbose=False)
    assert (args.rl_loss_agg_mode, args.rl_advantage_std_norm) == ("seq_mean_token_sum", False)
    assert {"rl_loss_agg_mode", "rl_advantage_std_norm"} <= set(result["derived"])
    text = format_effective_config(result)
    assert "rl_loss_agg_mode: 'seq_mean_token_sum' (from rl_policy_loss)" in text
    assert "rl_advantage_std_norm: False (from rl_policy_loss)" in text
    # an explicit value is kept and reported as explicit
    args = agentic_args("arpo", rl_loss_agg_mode="seq_mean_token_mean")
    result = resolve_presets(args, verbose=False)
    assert args.rl_loss_agg_mode == "seq_mean_token_mean" and "rl_loss_agg_mode" not in result["derived"]
    # the AEPO preset's balanced clip with gspo: refused when the presets are resolved, before any model loads
    with pytest.raises(ValueError, match="aepo_balanced_clip: false"):
        resolve_presets(agentic_args("aepo", rl_policy_loss="gspo"), verbose=False)


def test_rl_dual_clip_with_cispo_is_refused_where_it_would_cut_weights():
    # docs/algorithms.md §4.8 "Dual clip": CISPO's weights are at most 1 + eps_high; a dual clip c below that would cut
    # the weights of negative-advantage tokens, which CISPO keeps: refused, with the key and the fix
    with pytest.raises(ValueError, match=r"`rl_dual_clip: 3` is below that bound.*`rl_dual_clip: null`"):
        default_loss_config(rl_policy_loss="cispo", rl_epsilon=1.0, rl_epsilon_high=4.0)
    from llamafactory_agentic.train.presets import resolve_presets

    from ._helpers import agentic_args

    with pytest.raises(ValueError, match="rl_dual_clip"):  # before any model loads
        resolve_presets(agentic_args("arpo", rl_policy_loss="cispo", rl_epsilon_high=2.5), verbose=False)
    # c >= 1 + eps_high: the weight clip already holds the bound (the default 3.0 with eps_high 0.2), or no dual clip
    assert default_loss_config(rl_policy_loss="cispo", rl_epsilon=1.0, rl_epsilon_high=0.2).dual_clip == 3.0
    assert default_loss_config(rl_policy_loss="cispo", rl_epsilon_high=4.0, rl_dual_clip=None).dual_clip is None
    assert default_loss_config(rl_policy_loss="cispo", rl_epsilon_high=4.0, rl_dual_clip=5.0).dual_clip == 5.0
    # the PPO-clip losses and gspo apply the dual clip themselves: any epsilon_high is accepted
    for loss in ("ppo_clip", "dr_grpo", "gspo"):
        assert default_loss_config(rl_policy_loss=loss, rl_epsilon_high=4.0).dual_clip == 3.0
