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

"""Weight sync for the vLLM engine: module-by-module gathering and temporary LoRA merges (`rollout/weight_sync.py`)."""

import copy
from contextlib import contextmanager

import pytest
import torch

from llamafactory_agentic.rollout.weight_sync import push_weights, weight_units, zero3_gather


def lora_model(model, **kwargs):
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    config = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "k_proj", "o_proj", "gate_proj"],
        init_lora_weights=False,
        **kwargs,
    )
    return get_peft_model(model, config)


class FakeZero3:
    """Stands in for DeepSpeed ZeRO-3 (not installed here, and it needs a process group).

    Outside a gather every parameter holds an empty tensor, like a ZeRO-3 partitioned parameter on a rank; gathering
    puts a copy of its full value in place and exiting drops it again, discarding any change, like
    `deepspeed.zero.GatheredParameters(params, modifier_rank=None)`. Records how many elements are gathered at once.
    """

    def __init__(self, model):
        self.full = {}
        for p in model.parameters():
            self.full[p] = p.data
            p.data = torch.empty(0, dtype=p.dtype)
        self.calls, self.live, self.peak = [], 0, 0

    @contextmanager
    def __call__(self, params):
        self.calls.append(len(params))
        for p in params:
            p.data = self.full[p].clone()
            self.live += p.numel()
        self.peak = max(self.peak, self.live)
        try:
            yield
        finally:
            for p in params:
                self.live -= p.numel()
                p.data = torch.empty(0, dtype=p.dtype)


def test_plain_model_units_match_named_parameters(tiny_model):
    units = weight_units(tiny_model)
    names = [f"{u.prefix}.{n}" for u in units for n, _ in u.params]
    assert names == [n for n, _ in tiny_model.named_parameters()]  # tied lm_head sent once, as embed_tokens
    assert all(u.kind == "plain" for u in units)
    sent = []
    assert push_weights(tiny_model, sent.append) == len(names)
    assert len(sent) == len(units)  # one load_weights call per module
    assert zero3_gather(list(tiny_model.parameters())).__class__.__name__ == "nullcontext"


def test_zero3_gathers_one_module_at_a_time_and_merges_lora(tiny_model):
    peft_model = lora_model(tiny_model)
    expected = copy.deepcopy(peft_model).merge_and_unload()
    expected_params = dict(expected.named_parameters())
    total = sum(p.numel() for p in peft_model.parameters())
    fake = FakeZero3(peft_model)
    full_before = {p: t.clone() for p, t in fake.full.items()}

    received = {}

    def load_weights(pairs):
        for name, tensor in pairs:
            assert tensor.numel() > 0, f"{name} read outside its gather"
            received[name] = tensor.clone()

    push_weights(peft_model, load_weights, gather=fake)
    assert set(received) == set(expected_params)
    for name, value in received.items():
        torch.testing.assert_close(value, expected_params[name], rtol=0, atol=1e-6, msg=name)
    # never more than one module (a LoRA layer with its adapters, or the embedding) gathered at once
    units = weight_units(peft_model)
    largest = max(sum(fake.full[p].numel() for p in u.gathered) for u in units)
    assert fake.peak == largest < total / 2
    assert len(fake.calls) == len(units)
    assert sum(u.kind == "tuner" for u in units) == 4 * tiny_model.config.num_hidden_layers
    # partitioned again afterwards, shards unchanged
    assert all(p.numel() == 0 for p in peft_model.parameters())
    assert all(torch.equal(fake.full[p], full_before[p]) for p in fake.full)


def test_disabled_adapters_send_base_weights(tiny_model):
    peft_model = lora_model(tiny_model)
    received = {}
    with peft_model.disable_adapter():
        push_weights(peft_model, lambda pairs: received.update((n, t.clone()) for n, t in pairs))
    base = dict(peft_model.get_base_model().named_parameters())
    q = "model.layers.1.self_attn.q_proj.weight"
    assert torch.equal(received[q], base["model.layers.1.self_attn.q_proj.base_layer.weight"])


def test_quantized_base_is_refused(tiny_model):
    peft_model = lora_model(tiny_model)
    layer = peft_model.get_base_model().model.layers[0].self_attn.q_proj
    shape = layer.base_layer.weight.shape
    layer.base_layer.weight = torch.nn.Parameter(torch.zeros(shape, dtype=torch.int8), requires_grad=False)
    with pytest.raises(ValueError, match="QLoRA"):
        weight_units(peft_model)


def test_zero3_gather_only_gathers_partitioned_parameters(monkeypatch, tiny_model):
    # fake `deepspeed` module (not installed here): records what GatheredParameters is asked to gather
    import sys
    from types import SimpleNamespace

    asked = []
    zero = SimpleNamespace(GatheredParameters=lambda params, modifier_rank=None: asked.append((params, modifier_rank)))
    monkeypatch.setitem(sys.modules, "deepspeed", SimpleNamespace(zero=zero))
    params = list(tiny_model.parameters())[:3]
    params[0].ds_status = SimpleNamespace(name="NOT_AVAILABLE")
    params[1].ds_status = SimpleNamespace(name="AVAILABLE")  # gathered by an outer context: left alone
    zero3_gather(params)
    assert len(asked) == 1 and asked[0][0] == [params[0]] and asked[0][1] is None
    del params[0].ds_status
    assert zero3_gather(params).__class__.__name__ == "nullcontext" and len(asked) == 1
