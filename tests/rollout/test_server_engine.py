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

"""The `vllm_server` engine against a stand-in for `vllm serve` (issue 36, Deliver 4).

vLLM cannot run on this machine (no GPU), so `vllm_standin.py` stands in for its server: real HTTP on 127.0.0.1, a
real tiny model decoding, vLLM 0.22.1's response shapes and routes. Tolerance of the log-prob parity: absolute 1e-4
nats (fp32 on both sides; the stand-in decodes with a KV cache, the reference is one full forward, so they differ by
the order of float additions only, a few 1e-6 here). The NCCL and CUDA IPC data planes need GPUs: their HTTP control
sequence is checked with vLLM's trainer-side module replaced by a recording double (the GPU run in docs/scaling.md
exercises the real ones).
"""

import math
import sys
import types

import pytest
import torch

from llamafactory_agentic.rollout import GenerationRequest, SamplingSettings
from llamafactory_agentic.rollout.endpoint import EndpointError
from llamafactory_agentic.rollout.engine import engine_spec
from llamafactory_agentic.rollout.server_engine import ServerSetupError, VLLMServerEngine
from llamafactory_agentic.rollout.weight_sync import weight_units

from .vllm_standin import VLLMStandIn


ATOL = 1e-4


def teacher_forced(model, context, response, temperature):
    ids = torch.tensor([list(context) + list(response)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    return torch.log_softmax(logits[len(context) - 1 : -1], dim=-1)


def _engine(server, policy, tokenizer, tmp_path, **kwargs):
    kwargs.setdefault("weight_dir", str(tmp_path / "weights"))
    return VLLMServerEngine(policy, tokenizer, [server.url], timeout_s=30, retries=1, workers=4, **kwargs)


@pytest.fixture()
def policy(tiny_model):
    return tiny_model.float().eval()


def test_registered_with_server_capabilities():
    caps = engine_spec("vllm_server").capabilities
    assert caps.separate_process and caps.returns_logprobs and caps.prefix_branching
    assert not caps.shares_policy_weights


def test_results_carry_ids_behaviour_logprobs_entropies_and_version(tiny_model_dir, tiny_tokenizer, policy, tmp_path):
    """Token ids in and out; each sampled token's log-prob equals a teacher-forced forward at the sampling temperature."""
    tok = tiny_tokenizer
    prompt = tok.encode("<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n")
    prefix = tok.encode(" <think> Let me", add_special_tokens=False)
    with VLLMStandIn(tiny_model_dir) as server:
        engine = _engine(server, policy, tok, tmp_path, entropy_topk=5)
        assert engine.capabilities == engine_spec("vllm_server").capabilities
        engine.weight_version = 3
        requests = [
            GenerationRequest(0, prompt, [], 12, seed=1),
            GenerationRequest(1, prompt, prefix, 12, seed=2),  # a later round / a branch: the prefix continues
        ]
        for temperature in (1.0, 0.7):
            sampling = SamplingSettings(temperature=temperature, stop_strings=(), eos_token_ids=(), entropy_tokens=4,
                                        entropy_topk=5)  # fmt: skip
            for req, res in zip(requests, engine.generate(requests, sampling)):
                assert res.finish_reason == "length" and len(res.token_ids) == 12
                assert len(res.logprobs) == 12 and res.weight_version == 3
                ref = teacher_forced(policy, list(req.prompt_ids) + list(req.response_ids), res.token_ids, temperature)
                want = ref.gather(-1, torch.tensor(res.token_ids)[:, None])[:, 0]
                assert torch.allclose(torch.tensor(res.logprobs), want, atol=ATOL), torch.tensor(res.logprobs) - want
                # entropy terms of the first 4 positions: the top-5 entries plus the sampled token, as vLLM returns
                assert len(res.entropy_terms) == 4
                for j in range(4):
                    ids = set(torch.topk(ref[j], 5).indices.tolist()) | {res.token_ids[j]}
                    term = -sum(math.exp(ref[j, i]) * float(ref[j, i]) for i in ids)
                    assert abs(res.entropy_terms[j] - term) < ATOL
        body = next(b for b in server.completions if len(b["prompt"]) > len(prompt))  # requests run concurrently
        assert body["prompt"] == list(prompt) + list(prefix) and body["logprobs"] == 5
        assert body["return_token_ids"] and body["return_tokens_as_token_ids"]
        engine.close()


def test_finish_reasons_stop_strings_and_eos(tiny_model_dir, tiny_tokenizer, policy, tmp_path):
    tok = tiny_tokenizer
    prompt = tok.encode("<|im_start|>user\nSearch for cats<|im_end|>\n<|im_start|>assistant\n")
    with VLLMStandIn(tiny_model_dir) as server:
        engine = _engine(server, policy, tok, tmp_path)
        free = SamplingSettings(temperature=1.0, stop_strings=(), eos_token_ids=(), entropy_tokens=0)
        first = engine.generate([GenerationRequest(0, prompt, [], 16, seed=5)], free)[0]
        # the same seeded request again, with a stop string the free run wrote and a stop id it sampled
        text = tok.decode(first.token_ids[:6], skip_special_tokens=False)
        stop = text[-3:]
        sampling = SamplingSettings(temperature=1.0, stop_strings=(stop,), eos_token_ids=(), entropy_tokens=0)
        res = engine.generate([GenerationRequest(0, prompt, [], 16, seed=5)], sampling)[0]
        assert res.finish_reason == "stop" and res.stop_string == stop
        assert tok.decode(res.token_ids, skip_special_tokens=False).endswith(stop)
        assert res.token_ids == first.token_ids[: len(res.token_ids)] and len(res.logprobs) == len(res.token_ids)
        eos_id = first.token_ids[4]
        sampling = SamplingSettings(temperature=1.0, stop_strings=(), eos_token_ids=(eos_id,), entropy_tokens=0)
        res = engine.generate([GenerationRequest(0, prompt, [], 16, seed=5)], sampling)[0]
        cut = first.token_ids.index(eos_id) + 1
        assert res.finish_reason == "eos" and res.token_ids == first.token_ids[:cut]
        assert all(not math.isnan(v) for v in res.logprobs)  # the sampled EOS has its log-prob too
        assert engine.generate([GenerationRequest(0, prompt, [], 0)], free)[0].finish_reason == "length"
        engine.close()


def test_weight_push_carries_version_and_the_new_weights(tiny_model_dir, tiny_tokenizer, policy, tmp_path):
    """After a push of version 1 the server samples with the pushed weights (disk transfer: vLLM's reload_weights)."""
    tok = tiny_tokenizer
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    with VLLMStandIn(tiny_model_dir) as server:
        engine = _engine(server, policy, tok, tmp_path)
        names = sorted(f"{u.prefix}.{n}" if u.prefix else n for u in weight_units(policy) for n, _ in u.params)
        assert [(u["route"], u["version"]) for u in server.updates] == [("/collective_rpc", 0)]
        assert server.updates[0]["names"] == names and server.resets == 1
        with torch.no_grad():  # an optimiser step
            for p in policy.parameters():
                p.add_(0.05 * torch.randn_like(p))
        sampling = SamplingSettings(temperature=1.0, stop_strings=(), eos_token_ids=(), entropy_tokens=0)
        stale = engine.generate([GenerationRequest(0, prompt, [], 8, seed=3)], sampling)[0]
        ref = teacher_forced(policy, prompt, stale.token_ids, 1.0).gather(-1, torch.tensor(stale.token_ids)[:, None])
        assert not torch.allclose(torch.tensor(stale.logprobs), ref[:, 0], atol=ATOL)  # the server has old weights
        engine.weight_version = 1
        engine.set_model(policy)
        assert [(u["route"], u["version"]) for u in server.updates] == [("/collective_rpc", 0), ("/collective_rpc", 1)]
        fresh = engine.generate([GenerationRequest(0, prompt, [], 8, seed=3)], sampling)[0]
        ref = teacher_forced(policy, prompt, fresh.token_ids, 1.0).gather(-1, torch.tensor(fresh.token_ids)[:, None])
        assert torch.allclose(torch.tensor(fresh.logprobs), ref[:, 0], atol=ATOL) and fresh.weight_version == 1
        assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["version-1"]  # the older one removed
        engine.close()


def test_unreachable_server_names_the_url_and_the_fix(tiny_tokenizer, policy, tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(EndpointError, match="cannot be reached") as info:
        VLLMServerEngine(policy, tiny_tokenizer, [f"http://127.0.0.1:{port}"], timeout_s=5, retries=1)
    assert f"127.0.0.1:{port}" in str(info.value) and "rollout-server" in str(info.value)
    assert "arpo_server_urls" in str(info.value)


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"dev_mode": False}, "VLLM_SERVER_DEV_MODE=1"),
        ({"logprobs_mode": "raw_logprobs"}, "--logprobs-mode processed_logprobs"),
        ({"max_logprobs": 2}, "--max-logprobs 10"),
        ({"max_model_len": 64}, "--max-model-len"),
    ],
)
def test_a_server_without_a_needed_flag_is_refused_naming_it(tiny_model_dir, tiny_tokenizer, policy, tmp_path,
                                                              options, needle):  # fmt: skip
    with VLLMStandIn(tiny_model_dir, **options) as server, pytest.raises(ServerSetupError, match=needle):
        _engine(server, policy, tiny_tokenizer, tmp_path, entropy_topk=10, max_model_len=2048)
    assert not server.updates  # refused before any weight moved


def test_nccl_requested_from_a_server_without_weight_transfer_config(tiny_model_dir, tiny_tokenizer, policy, tmp_path):
    with VLLMStandIn(tiny_model_dir) as server, pytest.raises(ServerSetupError, match="--weight-transfer-config"):
        _engine(server, policy, tiny_tokenizer, tmp_path, weight_transfer="nccl")


def test_a_server_of_another_model_is_refused(tiny_model_dir, policy, tmp_path):
    from llamafactory_agentic.testing import build_tiny_tokenizer

    other = build_tiny_tokenizer(vocab_size=400, extra_corpus=["zebra quantum flux"])
    with VLLMStandIn(tiny_model_dir) as server, pytest.raises(ServerSetupError, match="another model"):
        _engine(server, policy, other, tmp_path)


def test_ipc_push_sends_every_unit_between_start_and_finish(tiny_model_dir, tiny_tokenizer, policy, tmp_path,
                                                            monkeypatch):  # fmt: skip
    """CUDA IPC needs a GPU: vLLM's trainer-side sender is replaced by a double that calls the send function."""
    sent = []

    class Info:
        def __init__(self, names, dtype_names, shapes):
            self.names, self.dtype_names, self.shapes = names, dtype_names, shapes
            self.ipc_handles, self.tensor_sizes, self.packed = [{"gpu-0": ("handle",)} for _ in names], None, False

    class IPCWeightTransferEngine:
        @staticmethod
        def trainer_send_weights(iterator, args):
            pairs = list(iterator)
            sent.append([t.dtype for _, t in pairs])
            args["send_mode"](
                Info([n for n, _ in pairs], ["bfloat16"] * len(pairs), [list(t.shape) for _, t in pairs])
            )

    module = types.ModuleType("vllm.distributed.weight_transfer.ipc_engine")
    module.IPCWeightTransferEngine = IPCWeightTransferEngine
    for name in ("vllm", "vllm.distributed", "vllm.distributed.weight_transfer"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    with VLLMStandIn(tiny_model_dir, weight_transfer="ipc") as server:
        engine = _engine(server, policy, tiny_tokenizer, tmp_path)
        engine.weight_version = 4
        engine.set_model(policy)
        routes = [(u["route"], u["version"]) for u in server.updates]
        units = len(weight_units(policy))
        assert routes[0] == ("/start_weight_update", 0) and routes[units + 1] == ("/finish_weight_update", None)
        assert routes[units + 2] == ("/start_weight_update", 4) and routes[-1] == ("/finish_weight_update", None)
        pushed = [n for u in server.updates[units + 3 : -1] for n in u["names"]]
        assert pushed == [f"{u.prefix}.{n}" if u.prefix else n for u in weight_units(policy) for n, _ in u.params]
        body = server.updates[1]["body"]["update_info"]
        assert "ipc_handles_pickled" in body and "ipc_handles" not in body  # vLLM's HTTP form of the handles
        assert all(d == torch.float32 for dtypes in sent for d in dtypes)  # cast to the server's dtype (fp32 here)
        engine.close()


def test_rollout_server_command_prints_the_vllm_serve_line(capsys):
    from llamafactory_agentic.cli import main

    assert main(["rollout-server", "--model", "/m/policy", "--gpu-memory-utilization", "0.3", "--max-model-len",
                 "2144", "--dry-run"]) == 0  # fmt: skip
    line = capsys.readouterr().out.strip()
    assert line.startswith("VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 vllm serve /m/policy")
    for flag in ("--logprobs-mode processed_logprobs", "--enable-prefix-caching", "--gpu-memory-utilization 0.3",
                 "--max-model-len 2144", "--weight-transfer-config '{\"backend\": \"ipc\"}'"):  # fmt: skip
        assert flag in line
    assert main(["rollout-server", "--model", "/m/policy", "--gpus", "6,7", "--dry-run"]) == 0
    line = capsys.readouterr().out.strip()
    assert "CUDA_VISIBLE_DEVICES=6,7" in line and "--tensor-parallel-size 2" in line and '"nccl"' in line


def test_rollout_server_refuses_a_fastapi_that_breaks_vllms_server(capsys, monkeypatch):
    """Seen on the H200: fastapi 0.163.2 made every request of vLLM 0.22.1's server fail in its metrics middleware
    (with the instrumentator 7.1.0 that constraints.txt pins, as here)."""
    import fastapi.routing

    from llamafactory_agentic.cli import main

    monkeypatch.setattr(fastapi.routing, "_IncludedRouter", object, raising=False)
    assert main(["rollout-server", "--model", "/m/policy"]) == 2
    err = capsys.readouterr().err
    assert "_IncludedRouter" in err and "fastapi==0.136.3" in err and "7.1.0" in err
    monkeypatch.delattr(fastapi.routing, "_IncludedRouter")
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    assert main(["rollout-server", "--model", "/m/policy"]) == 2  # past the check: no vllm here
    assert "vllm is not installed" in capsys.readouterr().err


def test_lora_policy_is_pushed_merged_under_base_names(tiny_model_dir, tiny_tokenizer, policy, tmp_path):
    """The server holds the base architecture: it gets the adapters merged, never `lora_*` tensors or a stale adapter."""
    from peft import LoraConfig, get_peft_model

    tok = tiny_tokenizer
    lora = get_peft_model(policy, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # a trained adapter (B = 0 would merge to the base weights)
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    sampling = SamplingSettings(temperature=1.0, stop_strings=(), eos_token_ids=(), entropy_tokens=0)
    with VLLMStandIn(tiny_model_dir) as server:
        engine = _engine(server, lora, tok, tmp_path)
        names = server.updates[0]["names"]
        assert names and not any("lora" in n or "base_layer" in n or n.startswith("base_model") for n in names)
        assert "model.layers.0.self_attn.q_proj.weight" in names
        for step in (1, 2):  # each push carries the adapter as it is now
            res = engine.generate([GenerationRequest(0, prompt, [], 8, seed=step)], sampling)[0]
            ref = teacher_forced(lora, prompt, res.token_ids, 1.0).gather(-1, torch.tensor(res.token_ids)[:, None])
            assert torch.allclose(torch.tensor(res.logprobs), ref[:, 0], atol=ATOL)
            with torch.no_grad():
                for name, p in lora.named_parameters():
                    if "lora_B" in name:
                        p.add_(0.3)
            engine.weight_version = step
            engine.set_model(lora)
        assert [u["version"] for u in server.updates] == [0, 1, 2]
        engine.close()
