# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The off-policy correction's weights checked by hand on small tensors (docs/algorithms.md §13.2)."""

import math

import pytest
import torch

from llamafactory_agentic.algorithms import get_policy_loss
from llamafactory_agentic.algorithms.off_policy import off_policy_weights


NAN = float("nan")
# 2 trajectories x 3 tokens; row 0 stale, row 1 sampled by the proximal weights themselves
PROX = torch.tensor([[-1.0, -2.0, -0.5], [-1.0, -1.0, -1.0]])
BEHAV = torch.tensor([[-1.5, -0.5, NAN], [-3.0, -3.0, -3.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
STALE = torch.tensor([True, False])


def test_decoupled_weight_is_the_uncapped_ratio_of_proximal_to_behaviour():
    w, metrics = off_policy_weights(PROX, BEHAV, STALE, MASK, mode="decoupled")
    # by hand: exp(-1.0 - -1.5) = exp(0.5) = 1.6487; exp(-2.0 - -0.5) = exp(-1.5) = 0.2231; NaN and masked -> 1
    expected = torch.tensor([[math.exp(0.5), math.exp(-1.5), 1.0], [1.0, 1.0, 1.0]])
    assert torch.allclose(w, expected)
    assert metrics["off_policy/corrected_tokens"] == 2.0
    assert metrics["off_policy/weight_mean"] == pytest.approx((math.exp(0.5) + math.exp(-1.5)) / 2)


def test_tis_weight_is_capped():
    prox = torch.tensor([[0.0, -1.0]])
    behav = torch.tensor([[-2.0, -0.9]])  # exp(2) = 7.389 -> capped at 2; exp(-0.1) = 0.9048 kept
    w, metrics = off_policy_weights(prox, behav, torch.tensor([True]), torch.ones(1, 2), mode="tis", cap=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, math.exp(-0.1)]]))
    assert metrics["off_policy/capped_frac"] == 0.5 and metrics["off_policy/weight_max"] == 2.0


def test_no_correction_at_staleness_zero_or_in_mode_none():
    """Row 1's behaviour log-probs differ from the proximal ones by 2 nats, yet it is not stale: weight exactly 1."""
    for mode in ("tis", "decoupled", "none"):
        w, _ = off_policy_weights(PROX, BEHAV, torch.tensor([False, False]), MASK, mode=mode)
        assert torch.equal(w, torch.ones(2, 3))
    w, _ = off_policy_weights(PROX, BEHAV, STALE, MASK, mode="none")
    assert torch.equal(w, torch.ones(2, 3))


@pytest.mark.parametrize("preset", ["arpo", "aepo"])
def test_weighting_the_advantage_weights_each_token_of_the_registered_loss(preset):
    """The clipped surrogate is positively homogeneous in A (min(r w A, clip(r) w A) = w min(r A, clip(r) A), dual
    clip too), so `micro_batch_loss` multiplying A by w > 0 weights each token's loss by w: checked against the loss
    of each token alone, weighted by hand."""
    from llamafactory_agentic.train.arpo.config import default_loss_config

    cfg = default_loss_config(preset, rl_dual_clip=3.0)
    loss_fn = get_policy_loss(cfg.policy_loss)
    logp = torch.tensor([[-0.9, -2.2, -0.4, -3.0]])
    old = torch.tensor([[-1.0, -2.0, -0.5, -1.0]])  # ratios 1.105, 0.819, 1.105, 0.135 (dual clip for A < 0)
    adv = torch.tensor([[1.0, -1.0, 0.5, -2.0]])
    w = torch.tensor([[1.6487, 0.2231, 2.0, 0.5]])
    mask = torch.ones(1, 4)
    weighted, _ = loss_fn(logp, old, adv * w, mask, cfg, num_tokens=4)
    by_hand = sum(
        w[0, t]
        * loss_fn(logp, old, adv, torch.nn.functional.one_hot(torch.tensor([t]), 4).float(), cfg, num_tokens=4)[0]
        for t in range(4)
    )
    assert torch.allclose(weighted, by_hand, atol=1e-6)


def test_bad_mode_and_cap_are_refused():
    with pytest.raises(ValueError, match="rl_off_policy_correction"):
        off_policy_weights(PROX, BEHAV, STALE, MASK, mode="is")
    with pytest.raises(ValueError, match="rl_off_policy_cap"):
        off_policy_weights(PROX, BEHAV, STALE, MASK, mode="tis", cap=0.0)
