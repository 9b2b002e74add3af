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

"""Entropy from logits (full and chunked), entropy z-score and AEPO's entropy-aware advantage."""

import math

import pytest
import torch

from llamafactory_agentic.algorithms import (
    entropy_aware_advantages,
    entropy_from_logits,
    entropy_from_logits_chunked,
    entropy_zscore,
    high_entropy_mask,
)


def test_entropy_hand_values_and_stability():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [5.0, float("-inf"), float("-inf"), float("-inf")]]])
    entropy = entropy_from_logits(logits)
    torch.testing.assert_close(entropy, torch.tensor([[math.log(4.0), 0.0]]))
    big = torch.tensor([[[1000.0, 0.0]]])  # no overflow: p = (1, e^-1000)
    assert entropy_from_logits(big).item() == pytest.approx(0.0, abs=1e-6)


def test_entropy_matches_categorical_and_temperature():
    torch.manual_seed(0)
    logits = 3 * torch.randn(2, 5, 11)
    expected = torch.distributions.Categorical(logits=logits).entropy()
    torch.testing.assert_close(entropy_from_logits(logits), expected, rtol=1e-5, atol=1e-5)
    hot = torch.distributions.Categorical(logits=logits / 0.7).entropy()
    torch.testing.assert_close(entropy_from_logits(logits, temperature=0.7), hot, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError):
        entropy_from_logits(logits, temperature=0.0)


def test_chunked_entropy_equals_full_with_gradients():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 13, dtype=torch.bfloat16).float().requires_grad_(True)
    full = entropy_from_logits(logits)
    chunked = entropy_from_logits_chunked(logits, chunk_size=4)
    torch.testing.assert_close(chunked, full)
    weights = torch.randn(3, 5)
    (grad_full,) = torch.autograd.grad((full * weights).sum(), logits)
    (grad_chunked,) = torch.autograd.grad((chunked * weights).sum(), logits)
    torch.testing.assert_close(grad_chunked, grad_full)
    with torch.no_grad():
        torch.testing.assert_close(
            entropy_from_logits_chunked(logits.bfloat16(), chunk_size=2), entropy_from_logits(logits.bfloat16())
        )
    with pytest.raises(ValueError):
        entropy_from_logits_chunked(logits, chunk_size=0)


def test_entropy_zscore_hand_values():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    z = entropy_zscore(entropy, mask)  # mean 2, unbiased std 1; masked position -> 0
    torch.testing.assert_close(z, torch.tensor([[-1.0, 0.0, 1.0, 0.0]]))
    entropy = torch.tensor([[1.0, 2.0], [4.0, 9.0]])
    z = entropy_zscore(entropy, torch.ones(2, 2))  # mean 4, unbiased std sqrt(38/3)
    torch.testing.assert_close(z, (entropy - 4.0) / math.sqrt(38 / 3))


def test_entropy_zscore_degenerate_rules():
    # std = 0 -> std 1 (z = H - mean = 0 on valid tokens), no NaN
    z = entropy_zscore(torch.tensor([[2.0, 2.0, 2.0, 7.0]]), torch.tensor([[1, 1, 1, 0]]))
    assert torch.equal(z, torch.zeros(1, 4))
    # fewer than 2 valid tokens -> z = 0 (the reference produces NaN here)
    z = entropy_zscore(torch.tensor([[1.0, 5.0, 9.0]]), torch.tensor([[0, 1, 0]]))
    assert torch.equal(z, torch.zeros(1, 3))
    z = entropy_zscore(torch.tensor([[1.0, 5.0]]), torch.tensor([[0, 0]]))
    assert torch.equal(z, torch.zeros(1, 2))


def test_entropy_aware_advantages_hand_values():
    advantages = torch.tensor([[1.0, 1.0, -1.0, 2.0]])
    entropy = torch.tensor([[1.0, 2.0, 3.0, 50.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0]])
    out = entropy_aware_advantages(advantages, entropy, mask, coef=0.2)  # z = -1, 0, 1, 0
    torch.testing.assert_close(out, torch.tensor([[0.8, 1.0, -1.2, 2.0]]))
    assert not out.requires_grad  # z is detached
    single = entropy_aware_advantages(advantages, entropy, torch.tensor([[0, 1, 0, 0]]), coef=0.2)
    assert torch.equal(single, advantages)
    assert torch.equal(entropy_aware_advantages(advantages, entropy, mask, coef=0.0), advantages)


def test_high_entropy_mask():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert high_entropy_mask(entropy, mask).tolist() == [[False, False, True, False]]
    assert high_entropy_mask(entropy, mask, threshold=-1.5).tolist() == [[True, True, True, False]]
