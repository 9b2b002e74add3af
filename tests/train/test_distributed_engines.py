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

"""The three first-step crashes of issue 25 (DeepSpeed ZeRO-2, ZeRO-3, FSDP on the H200), each reproduced by its
mechanism on the CPU with the real tiny Qwen2 model and the real hf engine:

* ZeRO-2: the engine's forward pre-hook on the unwrapped module (it synchronises the device, which fails inside CUDA
  graph capture) ran during the rollout. A hook that raises stands in for it (DeepSpeed itself needs a GPU).
* ZeRO-3: the fused log-prob head put into the tree during the loss forward had a plain `dict` as `_parameters`, while
  DeepSpeed's prologue sets `_in_forward` on every module's mapping. A mapping class with that attribute and the same
  prologue stand in for DeepSpeed's `ZeROOrderedDict`.
* FSDP: real `FullyShardedDataParallel` (version 1) on the CPU with a one-process gloo group: the rollout called the
  nested FSDP units first, and the root's forward then failed; and a sampling generator made for another device.

And FSDP2 (`fully_shard`) on two CPU ranks: every decode step all-gathered each unit, so a rank decoding more steps
than another waited for it (a gloo timeout); the rollout now gathers once.
"""

import functools
import socket
import types
from collections import OrderedDict

import pytest
import torch

from llamafactory_agentic.rollout import GenerationRequest, SamplingSettings
from llamafactory_agentic.rollout.hf_engine import HFEngine
from llamafactory_agentic.train.arpo.engine_hooks import (
    engine_forward_hook_handles,
    fsdp_unsharded,
    suspended_forward_hooks,
)
from llamafactory_agentic.train.arpo.logprobs import response_log_probs


SAMPLING = SamplingSettings(temperature=1.0, stop_strings=())


def _prompt(tokenizer):
    return tokenizer.encode("<|im_start|>user\nWhat is 1+2?<|im_end|>\n<|im_start|>assistant\n")


def _generate(model, tokenizer, seed=0, tokens=12):
    engine = HFEngine(model, tokenizer, max_batch_size=2, max_context=96, seed=seed)
    return engine.generate([GenerationRequest(0, _prompt(tokenizer), [], tokens)], SAMPLING)[0].token_ids


def test_engine_forward_hooks_are_off_during_the_rollout_and_back_in_order(tiny_model, tiny_tokenizer):
    calls = []

    def capture_breaking_hook(module, *args, **kwargs):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    first = tiny_model.register_forward_pre_hook(lambda m, a: calls.append("user-before"))
    pre = tiny_model.register_forward_pre_hook(capture_breaking_hook, with_kwargs=True)
    post = tiny_model.register_forward_hook(capture_breaking_hook)
    last = tiny_model.register_forward_pre_hook(lambda m, a: calls.append("user-after"))
    offload = types.SimpleNamespace(fwd_pre_hook=tiny_model.register_forward_pre_hook(capture_breaking_hook))
    engine = types.SimpleNamespace(
        module=tiny_model,
        module_forward_pre_hook=pre,
        module_forward_post_hook=post,
        optimizer=types.SimpleNamespace(parameter_offload=offload),
    )
    order = {name: list(getattr(tiny_model, name)) for name in ("_forward_pre_hooks", "_forward_hooks")}
    with pytest.raises(RuntimeError, match="stream is capturing"):  # what the rollout hit under ZeRO-2
        _generate(tiny_model, tiny_tokenizer)

    handles = engine_forward_hook_handles(engine)
    assert len(handles) == 3
    with suspended_forward_hooks(tiny_model, handles) as taken:
        assert taken == 3
        calls.clear()
        out = _generate(tiny_model, tiny_tokenizer)
    assert len(out) == 12 and calls[:2] == ["user-before", "user-after"]  # the user's own hooks still ran
    assert {name: list(getattr(tiny_model, name)) for name in order} == order
    assert first.id in tiny_model._forward_pre_hooks and last.id in tiny_model._forward_pre_hooks
    assert pre.id in tiny_model._forward_pre_hooks_with_kwargs
    with pytest.raises(RuntimeError, match="stream is capturing"):  # the training forward gets them back
        tiny_model(input_ids=torch.tensor([_prompt(tiny_tokenizer)]))
    assert engine_forward_hook_handles(types.SimpleNamespace(module=tiny_model)) == []  # DDP, FSDP, plain model


class _ZeroStyleParameters(OrderedDict):
    """Stands in for DeepSpeed ZeRO-3's `ZeROOrderedDict`: a parameter mapping with an `_in_forward` attribute."""

    def __init__(self, parent_module, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._parent_module = parent_module
        self._in_forward = False

    def __reduce__(self):
        r0, _, *rest = super().__reduce__()
        return (r0, (self._parent_module,)) + tuple(rest)


def test_fused_head_survives_a_zero3_style_forward_prologue(tiny_model):
    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 14))
    mask = torch.ones_like(ids)
    select = torch.ones(2, 6, dtype=torch.bool)
    expected, _ = response_log_probs(tiny_model, ids, mask, 6, select, 1.0, 4)

    for module in tiny_model.modules():  # as DeepSpeed's `_inject_parameters` does when the engine is built
        mapping = _ZeroStyleParameters(module)
        mapping.update(module._parameters)
        module._parameters = mapping

    def prologue(model, args, kwargs):  # DeepSpeedEngine._forward_prologue under ZeRO-3
        for module in model.modules():
            module._parameters._in_forward = True

    tiny_model.register_forward_pre_hook(prologue, with_kwargs=True)
    got, _ = response_log_probs(tiny_model, ids, mask, 6, select, 1.0, 4)
    assert torch.equal(got, expected)
    assert all(type(m._parameters) is _ZeroStyleParameters for m in tiny_model.modules())


def test_sampling_generator_follows_the_device_of_the_logits(tiny_model, tiny_tokenizer):
    expected = _generate(tiny_model, tiny_tokenizer, seed=3)
    engine = HFEngine(tiny_model, tiny_tokenizer, max_batch_size=2, max_context=96, seed=3)
    # the generator made when the model was first seen on another device (FSDP's cpu_ram_efficient_loading: CPU first,
    # the GPU later); torch refuses it for logits elsewhere ("Expected a 'cuda' device type for generator")
    engine._generator = types.SimpleNamespace(device=torch.device("cuda", 0))
    out = engine.generate([GenerationRequest(0, _prompt(tiny_tokenizer), [], 12)], SAMPLING)[0].token_ids
    assert out == expected  # a fresh generator with the same seed on the logits' device
    assert engine._generator.device == torch.device("cpu")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def gloo_group(monkeypatch):
    import torch.distributed as dist

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_fsdp_rollout_runs_plain_modules_on_full_weights_and_leaves_the_root_usable(
    gloo_group, tiny_model_dir, tiny_tokenizer
):
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    plain = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    expected = _generate(plain, tiny_tokenizer)
    before = {n: p.detach().clone() for n, p in plain.named_parameters()}
    policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
    wrapped = FSDP(
        AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)),
        auto_wrap_policy=policy,
        use_orig_params=True,
        device_id=torch.device("cpu"),
    )
    unwrapped = wrapped.module
    units = sum(isinstance(m, FSDP) for m in unwrapped.modules())
    assert units == plain.config.num_hidden_layers

    with fsdp_unsharded(wrapped, unwrapped) as taken:
        assert taken == units and not any(isinstance(m, FSDP) for m in unwrapped.modules())
        assert _generate(unwrapped, tiny_tokenizer) == expected
    assert sum(isinstance(m, FSDP) for m in unwrapped.modules()) == units  # the units are back

    # the root's first forward after the rollout (this raised "Non-root FSDP instance's `_is_root` should not have
    # been set yet" when the rollout had called the units directly)
    ids = torch.tensor([_prompt(tiny_tokenizer)])
    wrapped(input_ids=ids, labels=ids).loss.backward()
    with FSDP.summon_full_params(wrapped, writeback=False):
        for name, param in unwrapped.named_parameters():
            key = name.replace("_fsdp_wrapped_module.", "")
            assert torch.equal(param.detach(), before[key]), key  # the rollout changed no weight

    with fsdp_unsharded(plain, plain) as taken:  # not FSDP: nothing to do
        assert taken == 0


def _fsdp2_rank(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    """One rank of the FSDP2 test: rank 0 decodes alone inside `fsdp_unsharded` while rank 1 waits at the exit."""
    import datetime
    import json

    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.distributed.tensor import DTensor
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=90),
    )  # fmt: skip
    result = {"rank": rank}
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        expected = _generate(AutoModelForCausalLM.from_pretrained(model_dir), tokenizer, seed=rank)
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        assert isinstance(next(model.parameters()), DTensor)
        with fsdp_unsharded(model, model) as count:
            result["units"] = count
            result["plain_inside"] = not any(isinstance(p, DTensor) for p in model.parameters())
            if rank == 0:  # a collective in any decode step would wait for rank 1, which is not decoding: a timeout
                result["same_tokens"] = _generate(model, tokenizer, seed=rank) == expected
        result["sharded_after"] = all(isinstance(p, DTensor) for p in model.parameters())
        result["reshard_after_forward"] = all(
            m._get_fsdp_state()._fsdp_param_group.post_forward_mesh_info is not None
            for m in model.modules()
            if isinstance(m, FSDPModule) and m is not model
        )
        ids = torch.tensor([_prompt(tokenizer)])
        model(input_ids=ids, labels=ids).loss.backward()  # the training step after the rollout, on both ranks
        result["trained"] = all(p.grad is not None for p in model.parameters())
    except Exception as err:  # the parent asserts on the result file
        result["error"] = f"{type(err).__name__}: {err}"[:500]
    finally:
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()


@pytest.mark.slow
def test_fsdp2_rollout_gathers_once_and_decodes_without_collectives(tiny_model_dir, tmp_path):
    """FSDP2 (`fully_shard`) on two CPU ranks (gloo): inside `fsdp_unsharded` rank 0 decodes 12 tokens alone (ranks
    decode different numbers of steps in a rollout) with the full weights, and the units reshard and train afterwards.
    Without it every decode step all-gathers each unit: rank 0 waits for rank 1 until the group's timeout."""
    import json

    import torch.multiprocessing as mp

    mp.spawn(_fsdp2_rank, args=(2, _free_port(), str(tiny_model_dir), str(tmp_path)), nprocs=2, join=True)
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for result in results:
        assert "error" not in result, results
        assert result["units"] == 3 and result["plain_inside"] and result["sharded_after"], result  # 2 layers + root
        assert result["reshard_after_forward"] and result["trained"], result
    assert results[0]["same_tokens"], results


@pytest.mark.parametrize("engine", ["fsdp", "fsdp2"])
def test_lora_rollout_under_fsdp_decodes_the_merged_weights_and_restores_the_shards(
    engine, gloo_group, tiny_model_dir, tiny_tokenizer
):
    """LoRA under FSDP (v1, use_orig_params) and FSDP2 on one CPU rank: inside the rollout's contexts
    (`fsdp_unsharded`, then `GenerationWeights.applied` merging W + BA as the trainer nests them) the engine decodes
    the tokens of the merged plain model; afterwards every base weight and adapter is as before and the wrapped model
    trains."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    from llamafactory_agentic.rollout.generation_weights import GenerationWeights

    def lora_model():
        torch.manual_seed(
            0
        )  # the same adapters every time (init_lora_weights=False: B is not zero, the merge matters)
        base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        return get_peft_model(base, config)

    expected = _generate(lora_model().merge_and_unload(), tiny_tokenizer)
    assert expected != _generate(AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)), tiny_tokenizer)
    model = lora_model()
    if engine == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
        wrapped = FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
        unwrapped = wrapped.module

        def full_state():
            with FSDP.summon_full_params(wrapped, writeback=False):
                return {
                    n.replace("_fsdp_wrapped_module.", ""): p.detach().clone() for n, p in unwrapped.named_parameters()
                }
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (1,))
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = unwrapped = model

        def full_state():
            return {n: p.full_tensor().detach().clone() for n, p in unwrapped.named_parameters()}

    before = full_state()
    weights = GenerationWeights(None, "gpu")
    with fsdp_unsharded(wrapped, unwrapped), weights.applied(unwrapped):
        assert weights.last["merged_layers"] == 2 * 2  # q_proj and v_proj of both layers
        assert _generate(unwrapped, tiny_tokenizer) == expected
    after = full_state()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    ids = torch.tensor([_prompt(tiny_tokenizer)])
    wrapped(input_ids=ids, labels=ids).loss.backward()
    trained = [n for n, p in unwrapped.named_parameters() if p.requires_grad]
    assert trained and all("lora_" in n for n in trained)
    assert all(p.grad is not None for p in unwrapped.parameters() if p.requires_grad)


def _vllm_push_rank(rank: int, world: int, port: int, model_dir: str, out: str, engine: str) -> None:
    """One rank of the vLLM weight-push test: the pipeline's `PolicyGeneration` syncs an FSDP-wrapped policy into an
    engine that records what `load_weights` receives (vLLM itself cannot run here)."""
    import datetime
    import json

    import torch.distributed as dist
    from accelerate.utils import extract_model_from_parallel
    from transformers import AutoModelForCausalLM
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    from llamafactory_agentic.rollout.weight_sync import push_weights
    from llamafactory_agentic.train.arpo.pipeline import PolicyGeneration

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=90),
    )  # fmt: skip
    result = {"rank": rank}
    try:
        full = dict(AutoModelForCausalLM.from_pretrained(model_dir).named_parameters())
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        if engine == "fsdp":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

            policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Qwen2DecoderLayer})
            wrapped = FSDP(model, auto_wrap_policy=policy, use_orig_params=True, device_id=torch.device("cpu"))
        else:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            mesh = init_device_mesh("cpu", (world,))
            for layer in model.model.layers:
                fully_shard(layer, mesh=mesh)
            wrapped = fully_shard(model, mesh=mesh)
        received = {}

        class RecordingEngine:  # stands in for VLLMEngine.set_model: push_weights into vLLM's load_weights
            def set_model(self, policy):
                push_weights(policy, lambda pairs: received.update((n, t.detach().clone()) for n, t in pairs))

        from llamafactory_agentic.rollout.engine import VLLM_CAPABILITIES

        session = types.SimpleNamespace(
            backend="vllm", capabilities=VLLM_CAPABILITIES, engine=RecordingEngine(), lora_merge="gpu",
            set_phase=lambda *a: None, sync_weights=lambda policy, version=None: session.engine.set_model(policy),
            rollout=lambda *a, **k: None,
        )  # fmt: skip
        accelerator = types.SimpleNamespace(unwrap_model=extract_model_from_parallel,
                                            state=types.SimpleNamespace(deepspeed_plugin=None))  # fmt: skip
        PolicyGeneration(session, accelerator, None)(wrapped, [], training=True, global_step=0)
        result["names_match"] = sorted(received) == sorted(full)
        result["extra_names"] = sorted(set(received) - set(full))[:3]
        result["plain_tensors"] = all(type(t) is torch.Tensor for t in received.values())
        result["values_match"] = all(
            n in received and received[n].shape == p.shape and torch.equal(received[n], p.detach())
            for n, p in full.items()
        )
        ids = torch.tensor([[1, 2, 3, 4]])
        wrapped(input_ids=ids, labels=ids).loss.backward()  # the shards are usable for training afterwards
        result["trained"] = True
    except Exception as err:  # the parent asserts on the result file
        result["error"] = f"{type(err).__name__}: {err}"[:500]
    finally:
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["fsdp", "fsdp2"])
def test_vllm_weight_push_under_fsdp_sends_full_tensors_under_base_names(engine, tiny_model_dir, tmp_path):
    """The vllm backend's weight sync (`PolicyGeneration`, once per optimiser step) under FSDP v1 and FSDP2 on two CPU
    ranks: `load_weights` gets every parameter of the base model, full-sized, as a plain tensor, under its own name.
    Before, it got the rank's shards: FSDP v1's names carried `_fsdp_wrapped_module.` and its views held half the
    values; FSDP2 handed DTensors."""
    import json

    import torch.multiprocessing as mp

    mp.spawn(_vllm_push_rank, args=(2, _free_port(), str(tiny_model_dir), str(tmp_path), engine), nprocs=2, join=True)
    for rank in range(2):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert "error" not in result, result
        assert result["names_match"] and result["plain_tensors"] and result["values_match"], result
        assert result["trained"], result


class _FakeGatheredParameters:
    """Stands in for `deepspeed.zero.GatheredParameters` (DeepSpeed cannot run here): full data inside, partitioned
    (an empty tensor, as ZeRO-3 leaves it) after."""

    calls = 0

    def __init__(self, params, modifier_rank=None):
        self.params = list(params)

    def __enter__(self):
        type(self).calls += 1
        for p in self.params:
            p.data = p.ds_full
        return self

    def __exit__(self, *exc):
        for p in self.params:
            p.data = torch.empty(0, dtype=p.ds_full.dtype)
        return False


def test_lora_loss_under_zero3_gathers_the_frozen_head_instead_of_recomputing_it(tiny_model, monkeypatch):
    """ZeRO-3 + LoRA (the H200 smoke rows z3-hf-lora, z3off-hf-lora): the frozen LM head is partitioned (its data an
    empty tensor outside a gather). DeepSpeed's hooks gathered it for the forward, but when the loss's per-chunk
    checkpoint re-ran the head in the backward pass it met the partitioned `[0]` tensor: `CheckpointError:
    Recomputed values ... have different metadata`. Hooks that gather in the forward only stand in for that (as seen
    on the GPU); DeepSpeed's `GatheredParameters` is a stand-in too. Now the head is gathered once and its copy feeds
    the closed form: the same log-probs and LoRA gradients as without partitioning."""
    import sys

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    # an untied head (tied, ZeRO-3 would gather it with the embedding; untied is the case of most models of size)
    tiny_model.config.tie_word_embeddings = False
    tiny_model.lm_head.weight = torch.nn.Parameter(tiny_model.lm_head.weight.detach().clone())
    model = get_peft_model(tiny_model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    ids = torch.randint(3, 200, (2, 14))
    mask = torch.ones_like(ids)
    select = torch.ones(2, 6, dtype=torch.bool)

    def lora_grads():
        model.zero_grad()
        logp, _ = response_log_probs(model, ids, mask, 6, select, 1.0, 4)
        logp.sum().backward()
        return logp.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    expected, expected_grads = lora_grads()

    head = model.get_output_embeddings()
    weight = head.weight
    assert not weight.requires_grad  # LoRA: the head is frozen
    weight.ds_id, weight.ds_full = 7, weight.data.clone()
    weight.ds_status = types.SimpleNamespace(name="NOT_AVAILABLE")  # DeepSpeed's ZeroParamStatus when partitioned
    weight.data = torch.empty(0)

    def gather(module, args):  # DeepSpeed's fetch before a forward, not in the backward's recomputation
        if torch._C._current_graph_task_id() < 0:  # -1: no backward pass running
            weight.data = weight.ds_full

    def release(module, args, output):
        weight.data = torch.empty(0)

    head.register_forward_pre_hook(gather)
    head.register_forward_hook(release)
    monkeypatch.setitem(sys.modules, "deepspeed", types.SimpleNamespace(zero=types.SimpleNamespace()))
    monkeypatch.setattr(sys.modules["deepspeed"].zero, "GatheredParameters", _FakeGatheredParameters, raising=False)
    _FakeGatheredParameters.calls = 0

    got, got_grads = lora_grads()
    assert _FakeGatheredParameters.calls == 1  # one gather per loss forward
    assert weight.data.numel() == 0  # partitioned again afterwards
    torch.testing.assert_close(got, expected)
    assert got_grads.keys() == expected_grads.keys()
    for name in expected_grads:
        torch.testing.assert_close(got_grads[name], expected_grads[name], msg=name)


def test_fsdp2_bf16_output_cast_keeps_float32_log_probs_and_gradients(gloo_group, tiny_model_dir):
    """FSDP2 under accelerate's bf16 mixed precision casts every unit's output to bf16 (`output_dtype`), the root's
    too: the fused head's float32 log-probs came back in bf16 and the loss died in `masked_scatter_: expected self and
    source to have same dtypes but got Float and BFloat16` (the H200 smoke rows fsdp2-hf-full, fsdp2-hf-lora). Real
    `fully_shard` on one CPU rank with that policy: the float32 values of the plain model, and its gradients."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 14))
    mask = torch.ones_like(ids)
    select = torch.rand(2, 6) > 0.3

    plain = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    expected, _ = response_log_probs(plain, ids, mask, 6, select, 1.0, 4)
    expected.sum().backward()
    expected_grads = {n: p.grad.clone() for n, p in plain.named_parameters()}

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    mesh = init_device_mesh("cpu", (1,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    # accelerate sets output_dtype bf16 on every unit; on the root alone here, so that the layers' float32 outputs keep
    # the comparison with the plain model exact
    fully_shard(model, mesh=mesh, mp_policy=MixedPrecisionPolicy(output_dtype=torch.bfloat16))
    assert model(input_ids=ids).logits.dtype == torch.bfloat16  # the cast this is about
    got, _ = response_log_probs(model, ids, mask, 6, select, 1.0, 4)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected)
    got.sum().backward()
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad.full_tensor(), expected_grads[name], msg=name)


def test_memory_log_counts_fsdp2_shards(gloo_group, tiny_model_dir):
    """The trainer's memory log after an optimiser step under FSDP2 died on the H200 (`Attempted to access the data
    pointer on an invalid python storage`: a DTensor has no storage of its own). Real `fully_shard` on one CPU rank,
    a real AdamW step: weights, gradients and states are counted from the local shards (the whole model on one rank)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from llamafactory_agentic.train.arpo.memory import training_state_bytes

    plain = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    mesh = init_device_mesh("cpu", (1,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(3, 200, (2, 10))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()

    got = training_state_bytes(model, optimizer)
    weights = sum(p.numel() * p.element_size() for p in plain.parameters())  # tied embedding counted once
    assert got["weights"] == weights
    assert got["gradients"] == weights
    assert got["optimizer_states"] >= 2 * weights  # exp_avg and exp_avg_sq (+ step counters)
