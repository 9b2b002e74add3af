# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The policy's generation form (`rollout.generation_weights`): compute dtype, LoRA merged, restored bit for bit."""

import pytest
import torch


peft = pytest.importorskip("peft")

from llamafactory_agentic.rollout import GenerationRequest, SamplingSettings  # noqa: E402
from llamafactory_agentic.rollout.generation_weights import GenerationWeights  # noqa: E402
from llamafactory_agentic.rollout.hf_engine import HFEngine  # noqa: E402


TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def lora_model(tiny_model, use_dora=False):
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, use_dora=use_dora)
    model = peft.get_peft_model(tiny_model, config)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:  # peft starts B at 0 (delta 0); a trained adapter is not
                param.copy_(0.05 * torch.randn(param.shape, generator=gen))
    return model.eval()


def snapshot(model):
    return {name: (p.data_ptr(), p.dtype, p.detach().clone()) for name, p in model.named_parameters()}


def assert_restored(model, before):
    for name, p in model.named_parameters():
        ptr, dtype, value = before[name]
        assert p.data_ptr() == ptr and p.dtype == dtype, name  # the same storage as before (optimiser, DDP)
        assert torch.equal(p.detach(), value), name  # bit for bit


def logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.parametrize("mode", ["gpu", "cpu"])
def test_merged_lora_computes_the_adapted_model_and_restores_it_exactly(tiny_model, mode):
    model = lora_model(tiny_model)
    ids = torch.tensor([[5, 17, 42, 99, 7, 3]])
    adapted = logits(model, ids)
    before = snapshot(model)
    weights = GenerationWeights(None, mode)
    with weights.applied(model):
        layers = [m for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
        assert layers and all(m.merged for m in layers)  # peft's forward reads the base layer alone
        torch.testing.assert_close(logits(model, ids), adapted, rtol=1e-5, atol=1e-5)
    assert weights.last["merged_layers"] == len(layers) == 2 * len(TARGETS)
    assert (weights.last["extra_bytes"] > 0) == (mode == "gpu")  # cpu: merged in place, originals in CPU buffers
    assert not any(m.merged for m in layers)
    assert_restored(model, before)
    torch.testing.assert_close(logits(model, ids), adapted)
    with weights.applied(model):  # again (reused CPU buffers)
        torch.testing.assert_close(logits(model, ids), adapted, rtol=1e-5, atol=1e-5)
    assert_restored(model, before)


def test_restored_after_an_error_inside(tiny_model):
    model = lora_model(tiny_model)
    before = snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        with GenerationWeights(torch.bfloat16, "cpu").applied(model):
            raise RuntimeError("boom")
    assert_restored(model, before)


def test_compute_dtype_copy_for_float32_master_weights(tiny_model):
    before = snapshot(tiny_model)
    weights = GenerationWeights(torch.bfloat16, "gpu")
    with weights.applied(tiny_model):
        assert {p.dtype for p in tiny_model.parameters()} == {torch.bfloat16}
        expected = sum(p.numel() * 2 for p in tiny_model.parameters())
        assert weights.last["extra_bytes"] == expected  # +2 bytes per parameter during the rollout
    assert_restored(tiny_model, before)


def test_unmergeable_layers_stay_unmerged(tiny_model):
    model = lora_model(tiny_model, use_dora=True)  # DoRA: not W + BA
    ids = torch.tensor([[5, 17, 42, 99]])
    adapted = logits(model, ids)
    weights = GenerationWeights(None, "gpu")
    with weights.applied(model):
        assert weights.last["merged_layers"] == 0
        torch.testing.assert_close(logits(model, ids), adapted)


def test_engine_decodes_the_adapted_policy(tiny_model, tiny_tokenizer):
    model = lora_model(tiny_model)
    prompt = tiny_tokenizer.encode("<|im_start|>user\nWhat is 1+2?<|im_end|>\n<|im_start|>assistant\n")
    sampling = SamplingSettings(temperature=0.0, stop_strings=(), eos_token_ids=())
    request = [GenerationRequest(key=0, prompt_ids=prompt, response_ids=[], max_tokens=12)]
    unmerged = HFEngine(model, tiny_tokenizer, max_batch_size=2).generate(request, sampling)[0].token_ids
    with GenerationWeights(None, "cpu").applied(model):
        merged = HFEngine(model, tiny_tokenizer, max_batch_size=2).generate(request, sampling)[0].token_ids
    assert merged == unmerged  # greedy: the same policy
