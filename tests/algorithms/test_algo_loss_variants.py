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

"""GSPO, Dr. GRPO, CISPO and the aggregation modes, hand-checked on small tensors (docs/algorithms.md §4.8).

Every expected number is written from the formulas of docs/algorithms.md §4.8 (the papers' definitions), not computed by
the code under test; gradients are checked where they define the method (GSPO: one gradient per sequence; Dr. GRPO: a
per-token gradient independent of the sequence length; CISPO: the gradient flows only through log π).
"""

import math
from types import SimpleNamespace

import pytest
import torch

from llamafactory_agentic.algorithms import (
    aggregate_loss,
    compute_cispo_loss,
    compute_grpo_advantages,
    compute_gspo_loss,
    compute_policy_loss,
    get_advantage_estimator,
    get_policy_loss,
    list_policy_losses,
    masked_mean,
    ppo_clip_loss,
)


# ---------------------------------------------------------------------------------------------- aggregation
LOSS = [[1.0, 2.0, 3.0, float("nan")], [4.0, float("inf"), 5.0, 7.0]]
LOSS_MASK = [[1, 1, 1, 0], [1, 0, 0, 0]]


def test_aggregation_modes_hand_values():
    loss, mask = torch.tensor(LOSS), torch.tensor(LOSS_MASK)
    # masked positions (nan, inf) never contribute
    assert aggregate_loss(loss, mask, "token_mean").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate_loss(loss, mask, "seq_mean_token_sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate_loss(loss, mask, "seq_mean_token_mean").item() == pytest.approx((6 / 3 + 4 / 1) / 2)
    # explicit normalisers (the update's global counts)
    assert aggregate_loss(loss, mask, "token_mean", num_tokens=8).item() == pytest.approx(10 / 8)
    assert aggregate_loss(loss, mask, "seq_mean_token_sum", num_sequences=5).item() == pytest.approx(10 / 5)
    assert aggregate_loss(loss, mask, "seq_mean_token_mean", num_sequences=4).item() == pytest.approx(6 / 4)
    # an all-masked row is a sequence with loss 0 (counted in the default normaliser, the batch rows)
    empty = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]])
    assert aggregate_loss(loss, empty, "seq_mean_token_mean").item() == pytest.approx(2 / 2)


def test_token_mean_is_the_former_masked_mean_bit_for_bit():
    loss, mask = torch.randn(3, 7), (torch.rand(3, 7) > 0.4).long()
    assert torch.equal(aggregate_loss(loss, mask, "token_mean", num_tokens=11), masked_mean(loss, mask, 11))


@pytest.mark.parametrize("mode", ["token_mean", "seq_mean_token_sum", "seq_mean_token_mean"])
def test_micro_batch_losses_with_global_normalisers_sum_to_the_whole_update(mode):
    loss, mask = torch.randn(4, 6, dtype=torch.float64), (torch.rand(4, 6) > 0.3).long()
    whole = aggregate_loss(loss, mask, mode)
    tokens = int(mask.sum())
    parts = sum(
        aggregate_loss(loss[rows], mask[rows], mode, num_tokens=tokens, num_sequences=4)
        for rows in (slice(0, 1), slice(1, 4))
    )
    torch.testing.assert_close(parts, whole)


def test_unknown_aggregation_mode_is_refused():
    with pytest.raises(ValueError, match="Unknown loss aggregation mode 'seq_sum'.*token_mean"):
        aggregate_loss(torch.zeros(1, 2), torch.ones(1, 2), "seq_sum")


def test_ppo_clip_with_a_sequence_mode_hand_values():
    # ratio 1 everywhere: L_t = -A_t; rows of 2 and 1 loss-mask tokens
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.7, -0.9]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 0.0], [-2.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    loss, _ = compute_policy_loss(log_probs, log_probs.detach(), adv, mask, loss_agg_mode="seq_mean_token_mean")
    assert loss.item() == pytest.approx(((-1 - 1) / 2 + 2 / 1) / 2)
    loss.backward()
    # d/dl_t = -A_t * r_t / (|y_i| * N_seq)
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.25, -0.25, 0.0], [1.0, 0.0, 0.0]]))


def test_ppo_clip_loss_without_the_new_fields_is_unchanged():
    log_probs = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    old, adv, mask = torch.tensor([[-1.2, -1.5, -0.5]]), torch.tensor([[1.0, -1.0, 2.0]]), torch.tensor([[1, 1, 0]])
    settings = dict(epsilon_low=0.2, epsilon_high=0.28, dual_clip=3.0, balanced_clip=False)
    before = ppo_clip_loss(log_probs, old, adv, mask, SimpleNamespace(**settings), num_tokens=5)
    after = ppo_clip_loss(
        log_probs, old, adv, mask, SimpleNamespace(**settings, loss_agg_mode="token_mean"), num_tokens=5
    )
    assert torch.equal(before[0], after[0]) and before[1] == after[1]


# ---------------------------------------------------------------------------------------------- GSPO
# four sequences; log-ratios per loss-mask token and the sequence ratio s_i = exp(mean log-ratio)
GSPO_LOG_RATIOS = [[0.3, -0.1, 0.1], [0.5, 0.7, 0.0], [-0.6, -0.4, 0.0], [0.4, 0.2, 0.0]]
GSPO_MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 0], [1, 1, 0]]
GSPO_ADV = [1.0, 1.0, -1.0, -1.0]


def _gspo_inputs():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.3, -9.0], [-0.8, -1.1, -9.0], [-2.0, -0.4, -9.0]])
    log_probs = (old + torch.tensor(GSPO_LOG_RATIOS)).clone().requires_grad_(True)
    mask = torch.tensor(GSPO_MASK)
    adv = torch.tensor(GSPO_ADV)[:, None] * mask
    return log_probs, old, adv, mask


def test_gspo_sequence_ratio_and_sequence_clip_hand_values():
    log_probs, old, adv, mask = _gspo_inputs()
    loss, metrics = compute_gspo_loss(log_probs, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
    s0, s1, s2, s3 = math.exp(0.1), math.exp(0.6), math.exp(-0.5), math.exp(0.3)  # 1.105, 1.822, 0.607, 1.350
    # row 0: inside [0.8, 1.2] -> -A s; row 1: A > 0, s > 1.2 -> clipped -1.2; row 2: A < 0, s < 0.8 -> clipped
    # -A * 0.8 = 0.8; row 3: A < 0, s > 1.2 -> max(-A s, -A * 1.2) = s (unclipped); mean over the 4 sequences
    assert loss.item() == pytest.approx((-s0 - 1.2 + 0.8 + s3) / 4, abs=1e-7)
    # 9 loss-mask tokens: rows 1 and 2 (2 tokens each) clipped
    assert metrics["loss/clip_frac"] == pytest.approx(4 / 9)
    assert metrics["loss/clip_frac_upper"] == pytest.approx(2 / 9)
    assert metrics["loss/clip_frac_lower"] == pytest.approx(2 / 9)
    assert metrics["loss/ratio_mean"] == pytest.approx((3 * s0 + 2 * s1 + 2 * s2 + 2 * s3) / 9, rel=1e-6)
    assert metrics["loss/ratio_max"] == pytest.approx(s1, rel=1e-6)
    assert metrics["loss/num_tokens"] == 9

    loss.backward()
    # GSPO's gradient: -A_i * s_i * mean_t grad l_it / N_seq for an unclipped sequence, the same for each of its
    # tokens (token-level PPO would give each token its own ratio); 0 for every token of a clipped sequence
    expected = torch.tensor(
        [[-s0 / 3 / 4] * 3, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [s3 / 2 / 4, s3 / 2 / 4, 0.0]], dtype=torch.float32
    )
    torch.testing.assert_close(log_probs.grad, expected)


def test_gspo_gradient_equals_the_sequence_level_objective():
    # J = (1/G) sum_i -A_i * s_i(theta), s_i = exp(mean_t (l_it - l_old,it)), on the unclipped sequences (0 and 3)
    log_probs, old, adv, mask = _gspo_inputs()
    loss, _ = compute_gspo_loss(log_probs, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
    loss.backward()
    direct = log_probs.detach().clone().requires_grad_(True)
    maskf = mask.float()
    seq = torch.exp(((direct - old) * maskf).sum(-1) / maskf.sum(-1))
    keep = torch.tensor([1.0, 0.0, 0.0, 1.0])
    (-(torch.tensor(GSPO_ADV) * seq * keep).sum() / 4).backward()
    torch.testing.assert_close(log_probs.grad, direct.grad)


def test_gspo_on_policy_is_the_sequence_mean_of_minus_a():
    log_probs, _, adv, mask = _gspo_inputs()
    loss, metrics = compute_gspo_loss(log_probs, log_probs.detach(), adv, mask, num_sequences=8)
    assert loss.item() == pytest.approx((-1 - 1 + 1 + 1) / 8)
    assert metrics["loss/clip_frac"] == 0.0 and metrics["loss/ratio_mean"] == pytest.approx(1.0)


# ---------------------------------------------------------------------------------------------- CISPO
RATIOS = [1.1, 1.5, 0.5, 4.0, 1.0]
ADVANTAGES = [1.0, 1.0, -1.0, -1.0, -2.0]
MASK = [1, 1, 1, 1, 0]
OLD = [-1.0, -2.0, -0.5, -3.0, -1.0]


def _cispo_inputs():
    old = torch.tensor([OLD])
    log_probs = (old + torch.log(torch.tensor([RATIOS]))).clone().requires_grad_(True)
    return log_probs, old, torch.tensor([ADVANTAGES]), torch.tensor([MASK])


def test_cispo_hand_values_and_gradient_only_through_log_pi():
    log_probs, old, adv, mask = _cispo_inputs()
    loss, metrics = compute_cispo_loss(log_probs, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
    weights = [1.1, 1.2, 0.8, 1.2]  # clip(r, 0.8, 1.2)
    logp = [o + math.log(r) for o, r in zip(OLD, RATIOS)]
    expected = sum(-w * a * lp for w, a, lp in zip(weights, ADVANTAGES, logp)) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["loss/clip_frac"] == pytest.approx(3 / 4)  # r = 1.5, 0.5, 4.0 have clipped weights
    assert metrics["loss/clip_frac_upper"] == pytest.approx(2 / 4)
    assert metrics["loss/clip_frac_lower"] == pytest.approx(1 / 4)
    loss.backward()
    # dL/dl_t = -sg(w_t) * A_t / N for EVERY token: [-1.1, -1.2, +0.8, +1.2] / 4. PPO's clip would give 0 to token 1
    # (A > 0, r > 1.2) and its dual clip 0 to token 3; a weight with gradient would add -A * w * l_t / N at token 0.
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.275, -0.3, 0.2, 0.3, 0.0]]))
    ppo, _ = compute_policy_loss(log_probs, old, adv, mask)
    assert torch.autograd.grad(ppo, log_probs)[0][0, 1].item() == 0.0


def test_cispo_without_a_lower_bound_as_in_the_paper():
    log_probs, old, adv, mask = _cispo_inputs()
    loss, metrics = compute_cispo_loss(log_probs, old, adv, mask, epsilon_low=1.0, epsilon_high=0.2)
    loss.backward()
    # lower bound 1 - 1 = 0: token 2 keeps its weight r = 0.5
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.275, -0.3, 0.125, 0.3, 0.0]]))
    assert metrics["loss/clip_frac_lower"] == 0.0
    with pytest.raises(ValueError, match="0 <= epsilon_low <= 1"):
        compute_cispo_loss(log_probs, old, adv, mask, epsilon_low=1.5)


def test_cispo_with_a_sequence_mode():
    log_probs, old, adv, mask = _cispo_inputs()
    token_sum, _ = compute_cispo_loss(log_probs, old, adv, mask, loss_agg_mode="seq_mean_token_sum", num_sequences=2)
    token_mean, _ = compute_cispo_loss(log_probs, old, adv, mask)
    assert token_sum.item() == pytest.approx(token_mean.item() * 4 / 2, rel=1e-6)


# ---------------------------------------------------------------------------------------------- Dr. GRPO
def test_dr_grpo_advantages_have_no_std_division():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 2.0])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2])
    plain = compute_grpo_advantages(rewards, groups, std_norm=False)
    # group 0: mean 0.25 -> r - 0.25; group 1: equal rewards -> 0; group 2: a single row -> 0
    torch.testing.assert_close(plain, torch.tensor([0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0]))
    grpo = compute_grpo_advantages(rewards, groups)  # unbiased std of group 0 = 0.5
    torch.testing.assert_close(grpo[:4], torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + 1e-6))
    # the registered estimators read the switch from the run's config
    mask = torch.ones(7, 2, dtype=torch.long)
    for name in ("soft", "hard"):
        config = SimpleNamespace(hard_dedup=False, advantage_std_norm=False)
        token_adv, _ = get_advantage_estimator(name)(rewards, groups, mask, config)
        torch.testing.assert_close(token_adv, plain[:, None].expand(7, 2))


def test_dr_grpo_loss_token_sum_over_a_constant():
    # on-policy (ratio 1): L_t = -A_t; rows of 3 and 1 loss-mask tokens; L_max = 8
    log_probs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.7, -0.9]], requires_grad=True)
    adv = torch.tensor([[0.75, 0.75, 0.75], [-0.25, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    config = SimpleNamespace(epsilon_low=0.2, epsilon_high=0.2, dual_clip=3.0, balanced_clip=False,
                             max_response_length=8)  # fmt: skip
    loss, _ = get_policy_loss("dr_grpo")(log_probs, log_probs.detach(), adv, mask, config)
    assert loss.item() == pytest.approx((-0.75 * 3 + 0.25) / (2 * 8))
    loss.backward()
    # -A_t / (N_seq * L_max) for every token, whatever its sequence's length (no 1/|y_i| as in GRPO's per-sequence
    # mean, no 1/N_tokens as in the token mean)
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-0.75, -0.75, -0.75], [0.25, 0.0, 0.0]]) / 16)
    # the update's trajectory count (micro-batches) replaces the rows of the call
    loss4, _ = get_policy_loss("dr_grpo")(log_probs, log_probs.detach(), adv, mask, config, num_sequences=4)
    assert loss4.item() == pytest.approx((-0.75 * 3 + 0.25) / (4 * 8))


# ---------------------------------------------------------------------------------------------- registry
def test_the_new_losses_are_registered_and_read_the_config():
    assert {"gspo", "dr_grpo", "cispo", "ppo_clip", "arpo", "aepo"} <= set(list_policy_losses())
    log_probs, old, adv, mask = _cispo_inputs()
    config = SimpleNamespace(epsilon_low=0.1, epsilon_high=0.3, dual_clip=3.0, balanced_clip=False,
                             loss_agg_mode="seq_mean_token_mean")  # fmt: skip
    loss, metrics = get_policy_loss("cispo")(log_probs, old, adv, mask, config, num_sequences=3)
    want, want_metrics = compute_cispo_loss(log_probs, old, adv, mask, epsilon_low=0.1, epsilon_high=0.3,
                                            loss_agg_mode="seq_mean_token_mean", num_sequences=3)  # fmt: skip
    assert torch.equal(loss, want) and metrics == want_metrics
    g_log_probs, g_old, g_adv, g_mask = _gspo_inputs()
    loss, _ = get_policy_loss("gspo")(g_log_probs, g_old, g_adv, g_mask, config, num_sequences=3)
    want, _ = compute_gspo_loss(g_log_probs, g_old, g_adv, g_mask, epsilon_low=0.1, epsilon_high=0.3, num_sequences=3)
    assert torch.equal(loss, want)
    for name in ("gspo", "cispo"):
        with pytest.raises(ValueError, match="no balanced clip"):
            get_policy_loss(name)(log_probs, old, adv, mask, config, balanced_clip_mask=mask.bool())


# ---------------------------------------------------------------------------------------------- dual clip
def test_gspo_applies_rl_dual_clip_to_the_sequence_ratio():
    # docs/algorithms.md §4.8 "Dual clip": PPO's dual clip with the sequence ratio s_i in place of the token ratio
    old = torch.tensor([[-1.0, -2.0], [-1.0, -2.0], [-1.0, -2.0]])
    log_ratios = torch.tensor([[1.5, 1.5], [0.5, 0.5], [1.5, 1.5]])  # s = e^1.5 = 4.48, e^0.5 = 1.65, 4.48
    log_probs = (old + log_ratios).clone().requires_grad_(True)
    mask = torch.ones(3, 2)
    adv = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [1.0, 1.0]])
    s_hi, s_mid = math.exp(1.5), math.exp(0.5)
    config = SimpleNamespace(epsilon_low=0.2, epsilon_high=0.2, dual_clip=3.0, balanced_clip=False)
    loss, metrics = get_policy_loss("gspo")(log_probs, old, adv, mask, config)
    # row 0: A < 0, s = 4.48 > c = 3 -> the constant -c*A = 3, no gradient; row 1: A < 0, s = 1.65 <= c -> -A*s
    # (unchanged by the dual clip); row 2: A > 0, s > 1.2 -> clipped -1.2
    assert loss.item() == pytest.approx((3.0 + s_mid - 1.2) / 3, rel=1e-6)
    assert metrics["loss/dual_clip_frac"] == pytest.approx(2 / 6)
    loss.backward()
    expected = torch.tensor([[0.0, 0.0], [s_mid / 2 / 3] * 2, [0.0, 0.0]])
    torch.testing.assert_close(log_probs.grad, expected)
    # without the dual clip (rl_dual_clip: null, the paper's GSPO) row 0 is -A*s, unbounded in s
    loss_off, metrics_off = get_policy_loss("gspo")(
        log_probs, old, adv, mask, SimpleNamespace(**{**vars(config), "dual_clip": None})
    )
    assert loss_off.item() == pytest.approx((s_hi + s_mid - 1.2) / 3, rel=1e-6)
    assert metrics_off["loss/dual_clip_frac"] == 0.0
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        compute_gspo_loss(log_probs, old, adv, mask, dual_clip=1.0)
