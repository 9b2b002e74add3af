# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Chunked log-probs and entropies fused with the output projection (`algorithms.logprobs`) against full logits."""

import pytest
import torch

from llamafactory_agentic.algorithms.logprobs import linear_log_probs, module_log_probs


def reference(hidden, weight, bias, targets, temperature):
    logits = hidden @ weight.t()
    if bias is not None:
        logits = logits + bias
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    return log_p.gather(1, targets[:, None]).squeeze(1), -(log_p.exp() * log_p).sum(-1)


def leaves(n=37, hidden=16, vocab=50, bias=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    h = torch.randn(n, hidden, generator=gen, dtype=torch.float64, requires_grad=True)
    w = torch.randn(vocab, hidden, generator=gen, dtype=torch.float64, requires_grad=True)
    b = torch.randn(vocab, generator=gen, dtype=torch.float64, requires_grad=True) if bias else None
    t = torch.randint(0, vocab, (n,), generator=gen)
    return h, w, b, t


def grads_of(tensors):
    out = [x.grad.clone() for x in tensors if x is not None]
    for x in tensors:
        if x is not None:
            x.grad = None
    return out


@pytest.mark.parametrize("chunk", [1, 7, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("entropy_grad", [False, True])
def test_values_and_gradients_equal_the_full_logits(chunk, temperature, bias, entropy_grad):
    h, w, b, t = leaves(bias=bias)
    gen = torch.Generator().manual_seed(1)
    g_logp, g_ent = torch.randn(len(t), generator=gen, dtype=torch.float64), torch.randn(len(t), generator=gen)
    ref_logp, ref_ent = reference(h, w, b, t, temperature)
    (ref_logp * g_logp + (ref_ent * g_ent if entropy_grad else 0)).sum().backward()
    expected = grads_of((h, w, b))

    logp, ent = linear_log_probs(
        h, w, t, bias=b, temperature=temperature, chunk_size=chunk, with_entropy=True, entropy_grad=entropy_grad
    )
    assert logp.dtype == ent.dtype == torch.float32  # reduced in float32 whatever the input dtype
    assert ent.requires_grad == entropy_grad
    torch.testing.assert_close(logp.double(), ref_logp.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent.double(), ref_ent.detach(), rtol=1e-5, atol=1e-5)
    (logp.double() * g_logp + (ent.double() * g_ent if entropy_grad else 0)).sum().backward()
    for got, want in zip(grads_of((h, w, b)), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_module_path_equals_the_closed_form_and_keeps_hooks():
    h, w, b, t = leaves(bias=True)
    head = torch.nn.Linear(16, 50, dtype=torch.float64)
    with torch.no_grad():
        head.weight.copy_(w)
        head.bias.copy_(b)
    calls = []
    head.register_forward_hook(lambda module, args, out: calls.append(args[0].shape[0]))
    logp, ent = module_log_probs(h, head, t, temperature=0.8, chunk_size=10, with_entropy=True, entropy_grad=True)
    ref_logp, ref_ent = reference(h, w, b, t, 0.8)
    torch.testing.assert_close(logp.double(), ref_logp.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent.double(), ref_ent.detach(), rtol=1e-5, atol=1e-5)
    (logp.sum() + ent.sum()).backward()
    (ref_logp.sum() + ref_ent.sum()).backward()
    torch.testing.assert_close(head.weight.grad, w.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(head.bias.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert calls[:4] == [10, 10, 10, 7]  # the module (and its hooks) ran once per chunk, then again in the backward


def test_no_logits_are_kept_for_the_backward():
    # what autograd keeps between forward and backward: never a [positions, vocab] tensor
    h, w, _, t = leaves(n=64, hidden=8, vocab=500)
    sizes = []

    def pack(x):
        sizes.append(tuple(x.shape))
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        logp, ent = linear_log_probs(h, w, t, chunk_size=16, with_entropy=True)
        (logp.sum()).backward()
    assert sizes and all(500 not in s or s == (500, 8) for s in sizes), sizes  # the weight itself is [V, H]
    sizes.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        ref_logp, _ = reference(h, w, None, t, 1.0)
    assert any(s == (64, 500) for s in sizes)  # the materialising path keeps [n, V] logits


def test_no_grad_keeps_no_graph_and_empty_selection_stays_differentiable():
    h, w, _, t = leaves()
    with torch.no_grad():
        logp, ent = linear_log_probs(h, w, t, with_entropy=True)
    assert not logp.requires_grad and not ent.requires_grad
    empty_h, empty_t = h[:0], t[:0]
    logp, _ = linear_log_probs(empty_h, w, empty_t)
    assert logp.shape == (0,) and logp.requires_grad  # a micro-batch without trained tokens still backpropagates
    logp.sum().backward()
    assert torch.count_nonzero(w.grad) == 0
    head = torch.nn.Linear(16, 50, dtype=torch.float64)
    logp, _ = module_log_probs(empty_h, head, empty_t)
    assert logp.shape == (0,) and logp.requires_grad


def test_minus_infinity_logits_give_finite_entropy():
    h, w, b, t = leaves(bias=True)
    with torch.no_grad():
        b[:10] = float("-inf")  # a vocabulary slice that can never be sampled
    t = t.clamp(min=10)
    logp, ent = linear_log_probs(h, w, t, bias=b, with_entropy=True, entropy_grad=True)
    assert torch.isfinite(logp).all() and torch.isfinite(ent).all()
    (logp.sum() + ent.sum()).backward()
    assert torch.isfinite(h.grad).all() and torch.isfinite(w.grad).all()


def test_bad_arguments():
    h, w, _, t = leaves()
    with pytest.raises(ValueError, match="chunk_size"):
        linear_log_probs(h, w, t, chunk_size=0)
    with pytest.raises(ValueError, match="temperature"):
        module_log_probs(h, torch.nn.Linear(16, 50, dtype=torch.float64), t, temperature=0.0)
