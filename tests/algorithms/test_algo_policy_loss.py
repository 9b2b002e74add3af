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

"""Policy loss: PPO clip, dual clip, token-mean normaliser, AEPO balanced clip (values and autograd), KL."""

import math
from types import SimpleNamespace

import pytest
import torch

from llamafactory_agentic.algorithms import (
    compute_aepo_policy_loss,
    compute_kl_loss,
    compute_policy_loss,
    get_policy_loss,
    list_policy_losses,
    low_var_kl,
    masked_mean,
)


RATIOS = [1.1, 1.5, 0.5, 4.0, 1.0]
ADVANTAGES = [1.0, 1.0, -1.0, -1.0, -2.0]
MASK = [1, 1, 1, 1, 0]


def _inputs(ratios=RATIOS, advantages=ADVANTAGES, mask=MASK):
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.0]])
    log_probs = (old + torch.log(torch.tensor([ratios]))).clone().requires_grad_(True)
    return log_probs, old, torch.tensor([advantages]), torch.tensor([mask])


def test_ppo_clip_dual_clip_hand_values():
    log_probs, old, adv, mask = _inputs()
    loss, metrics = compute_policy_loss(log_probs, old, adv, mask)
    # t0: unclipped -1.1; t1: upper clip -1.2; t2: lower clip 0.8; t3: max(4, 1.2) = 4 -> dual clip 3; t4 masked
    assert loss.item() == pytest.approx((-1.1 - 1.2 + 0.8 + 3.0) / 4, abs=1e-6)
    assert metrics["loss/clip_frac"] == pytest.approx(0.5)
    assert metrics["loss/clip_frac_upper"] == pytest.approx(0.25)
    assert metrics["loss/clip_frac_lower"] == pytest.approx(0.25)
    assert metrics["loss/dual_clip_frac"] == pytest.approx(0.25)
    assert metrics["loss/balanced_clip_frac"] == 0.0
    assert metrics["loss/ratio_mean"] == pytest.approx((1.1 + 1.5 + 0.5 + 4.0) / 4, rel=1e-6)
    assert metrics["loss/ratio_max"] == pytest.approx(4.0, rel=1e-6)
    expected_kl = -(math.log(1.1) + math.log(1.5) + math.log(0.5) + math.log(4.0)) / 4
    assert metrics["loss/approx_kl"] == pytest.approx(expected_kl, abs=1e-6)
    assert metrics["loss/num_tokens"] == 4
    loss.backward()
    # only the unclipped token has a gradient: d(-A r)/d logp = -A r, over 4 tokens
    torch.testing.assert_close(log_probs.grad, torch.tensor([[-1.1 / 4, 0.0, 0.0, 0.0, 0.0]]))


def test_no_clipping_gives_minus_mean_advantage():
    log_probs, old, adv, mask = _inputs(ratios=[1.0] * 5)
    loss, metrics = compute_policy_loss(log_probs, old, adv, mask)
    assert loss.item() == pytest.approx(-(1 + 1 - 1 - 1) / 4)
    assert metrics["loss/clip_frac"] == 0.0 and metrics["loss/dual_clip_frac"] == 0.0


def test_dual_clip_off_and_asymmetric_epsilons():
    log_probs, old, adv, mask = _inputs()
    loss, _ = compute_policy_loss(log_probs, old, adv, mask, dual_clip=None)
    assert loss.item() == pytest.approx((-1.1 - 1.2 + 0.8 + 4.0) / 4, abs=1e-6)
    loss, metrics = compute_policy_loss(log_probs, old, adv, mask, epsilon_low=0.1, epsilon_high=0.3)
    # t1 clipped at 1.3, t2 at 0.9
    assert loss.item() == pytest.approx((-1.1 - 1.3 + 0.9 + 3.0) / 4, abs=1e-6)
    assert metrics["loss/clip_frac_upper"] == pytest.approx(0.25)


def test_num_tokens_normaliser_over_micro_batches():
    torch.manual_seed(0)
    old = torch.randn(4, 6)
    log_probs = (old + 0.4 * torch.randn(4, 6)).requires_grad_(True)
    adv = torch.randn(4, 6)
    mask = (torch.rand(4, 6) > 0.3).long()
    full, _ = compute_policy_loss(log_probs, old, adv, mask)
    (full_grad,) = torch.autograd.grad(full, log_probs)
    total = int(mask.sum())
    parts = [
        compute_policy_loss(log_probs[s], old[s], adv[s], mask[s], num_tokens=total)[0]
        for s in (slice(0, 1), slice(1, 4))
    ]
    summed = parts[0] + parts[1]
    (summed_grad,) = torch.autograd.grad(summed, log_probs)
    torch.testing.assert_close(summed, full)
    torch.testing.assert_close(summed_grad, full_grad)
    explicit, _ = compute_policy_loss(log_probs, old, adv, mask, num_tokens=2 * total)
    torch.testing.assert_close(explicit, full / 2)
    with pytest.raises(ValueError):
        compute_policy_loss(log_probs, old, adv, mask, num_tokens=0)


def test_masked_positions_never_leak_nan():
    log_probs, old, adv, mask = _inputs()
    log_probs = log_probs.detach().clone()
    log_probs[0, 4] = float("nan")
    log_probs.requires_grad_(True)
    loss, _ = compute_policy_loss(log_probs, old, adv, mask)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(log_probs.grad).all()
    assert masked_mean(torch.tensor([[1.0, float("inf")]]), torch.tensor([[1, 0]])).item() == 1.0
    assert masked_mean(torch.zeros(1, 2), torch.zeros(1, 2)).item() == 0.0
    # a micro-batch without loss tokens (possible on one rank) contributes 0 and finite metrics
    empty_loss, empty_metrics = compute_policy_loss(log_probs, old, adv, torch.zeros_like(mask), num_tokens=7)
    assert empty_loss.item() == 0.0 and all(math.isfinite(v) for v in empty_metrics.values())
    assert empty_metrics["loss/num_tokens"] == 0.0


def test_balanced_clip_gradient_and_value():
    log_probs, old, adv, mask = _inputs()
    ppo_loss, ppo_metrics = compute_policy_loss(log_probs, old, adv, mask)
    (ppo_grad,) = torch.autograd.grad(ppo_loss, log_probs)
    loss, metrics = compute_policy_loss(log_probs, old, adv, mask, balanced_clip=True)
    (grad,) = torch.autograd.grad(loss, log_probs)
    assert torch.equal(loss, ppo_loss)  # loss value unchanged
    # t1 (A = 1 > 0, r = 1.5 > 1.2): gradient -(1 + eps) * A / num_tokens instead of 0; all others as PPO
    expected = ppo_grad.clone()
    expected[0, 1] = -(1 + 0.2) * 1.0 / 4
    torch.testing.assert_close(grad, expected)
    assert metrics["loss/balanced_clip_frac"] == pytest.approx(0.25)
    for key in ("loss/clip_frac", "loss/clip_frac_upper", "loss/clip_frac_lower", "loss/dual_clip_frac"):
        assert metrics[key] == ppo_metrics[key]


def test_balanced_clip_mask_restricts_the_bound():
    log_probs, old, adv, mask = _inputs()
    ppo_loss, _ = compute_policy_loss(log_probs, old, adv, mask)
    (ppo_grad,) = torch.autograd.grad(ppo_loss, log_probs)
    only_t0 = torch.tensor([[True, False, False, False, False]])
    loss, metrics = compute_policy_loss(log_probs, old, adv, mask, balanced_clip=True, balanced_clip_mask=only_t0)
    (grad,) = torch.autograd.grad(loss, log_probs)
    torch.testing.assert_close(grad, ppo_grad)
    assert metrics["loss/balanced_clip_frac"] == 0.0
    only_t1 = torch.tensor([[False, True, False, False, False]])
    loss, metrics = compute_policy_loss(log_probs, old, adv, mask, balanced_clip=True, balanced_clip_mask=only_t1)
    (grad,) = torch.autograd.grad(loss, log_probs)
    assert grad[0, 1].item() == pytest.approx(-1.2 / 4)
    assert metrics["loss/balanced_clip_frac"] == pytest.approx(0.25)
    with pytest.raises(ValueError):
        compute_policy_loss(log_probs, old, adv, mask, balanced_clip_mask=only_t1)


def _naive_ppo(log_probs, old, adv, mask, eps_low, eps_high, c):
    ratio = torch.exp(log_probs - old)
    loss1 = -adv * ratio
    loss2 = -adv * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    clipped = torch.maximum(loss1, loss2)
    dual = torch.minimum(clipped, -adv * c)
    token_loss = torch.where(adv < 0, dual, clipped)
    return (token_loss * mask).sum() / mask.sum()


def test_all_aepo_switches_off_equals_plain_ppo_clip():
    torch.manual_seed(1)
    old = torch.randn(6, 16)
    log_probs = (old + 0.6 * torch.randn(6, 16)).requires_grad_(True)
    adv = torch.randn(6, 16)
    mask = (torch.rand(6, 16) > 0.2).float()
    reference = _naive_ppo(log_probs, old, adv, mask, 0.2, 0.28, 3.0)
    (reference_grad,) = torch.autograd.grad(reference, log_probs)
    loss, _ = compute_aepo_policy_loss(log_probs, old, adv, mask, epsilon_high=0.28, balanced_clip=False)
    (grad,) = torch.autograd.grad(loss, log_probs)
    assert torch.equal(loss, reference)
    assert torch.equal(grad, reference_grad)
    # and the balanced clip changes exactly the A > 0, r > 1 + eps_high tokens, never the value
    loss_b, _ = compute_aepo_policy_loss(log_probs, old, adv, mask, epsilon_high=0.28)
    (grad_b,) = torch.autograd.grad(loss_b, log_probs)
    assert torch.equal(loss_b, loss)
    ratio = torch.exp(log_probs.detach() - old)
    changed = (adv > 0) & (ratio > 1.28) & mask.bool()
    assert changed.any()
    torch.testing.assert_close(grad_b[changed], -(1.28 * adv[changed]) / mask.sum())
    assert torch.equal(grad_b[~changed], grad[~changed])


def test_policy_loss_registry_passes_the_config_object():
    assert {"arpo", "aepo", "ppo_clip"} <= set(list_policy_losses())
    assert get_policy_loss("arpo") is get_policy_loss("ppo_clip")
    log_probs, old, adv, mask = _inputs()
    config = SimpleNamespace(epsilon_low=0.1, epsilon_high=0.3, dual_clip=2.0, balanced_clip=True)
    clip_mask = torch.zeros_like(mask, dtype=torch.bool)
    for name, direct in (("ppo_clip", compute_policy_loss), ("aepo", compute_aepo_policy_loss)):
        loss, metrics = get_policy_loss(name)(log_probs, old, adv, mask, config, balanced_clip_mask=clip_mask)
        want, want_metrics = direct(
            log_probs, old, adv, mask, epsilon_low=0.1, epsilon_high=0.3, dual_clip=2.0, balanced_clip=True,
            balanced_clip_mask=clip_mask,
        )  # fmt: skip
        assert torch.equal(loss, want) and metrics == want_metrics


def test_policy_loss_argument_checks():
    log_probs, old, adv, mask = _inputs()
    with pytest.raises(ValueError):
        compute_policy_loss(log_probs, old, adv, mask, dual_clip=1.0)
    with pytest.raises(ValueError):
        compute_policy_loss(log_probs, old[:, :3], adv, mask)


def test_low_var_kl_and_kl_loss():
    log_probs = torch.tensor([[0.0, -1.0, -2.0, -30.0]])
    ref = torch.tensor([[0.0, -2.0, -1.0, 0.0]])
    kl = low_var_kl(log_probs, ref)
    expected = [0.0, math.exp(-1) + 1 - 1, math.exp(1) - 1 - 1, 10.0]  # k3 = e^d - d - 1, d = ref - logp; clamp 10
    torch.testing.assert_close(kl, torch.tensor([expected]))
    loss = compute_kl_loss(log_probs, ref, torch.tensor([[1, 1, 1, 0]]))
    assert loss.item() == pytest.approx(sum(expected[:3]) / 3, rel=1e-6)
