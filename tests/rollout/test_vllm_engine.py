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

"""`vllm` backend against a fake `vllm` module.

vLLM cannot run here (no GPU, not installed), so this test installs a fake module into `sys.modules` that honours
vLLM's public contract: `LLM.generate(prompts=[{"prompt_token_ids": ...}], sampling_params=[SamplingParams])` returns
`RequestOutput`s whose `outputs[0]` has `token_ids`, `logprobs` (one `{token_id: Logprob}` dict per position with the
top-k plus the sampled token), `finish_reason` ("stop" | "length") and `stop_reason` (the stop string, a stop token
id, or None for EOS); with `include_stop_str_in_output=True` the output ends with the token completing the stop string.
"""

import math
import sys
import types
from dataclasses import dataclass

import pytest

from llamafactory_agentic.rollout import (
    AgenticRollout,
    GenerationRequest,
    SamplingSettings,
    build_engine,
)
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import RecordingExecutor


@dataclass
class Logprob:
    logprob: float


class FakeFlatLogprobs:
    """vLLM 0.22.1's `FlatLogprobs` as read from the wheel: the positions' entries in flat lists; an index gives one
    position's `{token_id: Logprob}` dict, a slice a new container, and a slice of zero positions raises IndexError
    (`start_indices[index][0]`)."""

    def __init__(self, positions):
        self.starts, self.ends, self.token_ids, self.values = [], [], [], []
        for position in positions:
            self.starts.append(len(self.token_ids))
            for token, lp in position.items():
                self.token_ids.append(token)
                self.values.append(lp.logprob)
            self.ends.append(len(self.token_ids))

    def __len__(self):
        return len(self.starts)

    def __getitem__(self, index):
        if isinstance(index, slice):
            self.starts[index][0]  # noqa: B018 - a slice of zero positions raises IndexError, as vLLM's does
            return FakeFlatLogprobs([self[i] for i in range(len(self))[index]])
        return {self.token_ids[i]: Logprob(self.values[i]) for i in range(self.starts[index], self.ends[index])}


class FakeLLM:
    def __init__(self, tokenizer, scripts, **kwargs):
        self.tokenizer, self.scripts, self.kwargs = tokenizer, scripts, kwargs
        self.calls, self.loaded, self.slept, self.woke, self.resets = [], [], 0, 0, 0
        # vLLM 0.22's public contract: `apply_model(fn)` runs `fn` on each worker's model and returns the results
        self.model = types.SimpleNamespace(load_weights=lambda w: self.loaded.append(list(w)))
        self.llm_engine = types.SimpleNamespace()

    def apply_model(self, fn):
        return [fn(self.model)]

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        outs = []
        for prompt, sp in zip(prompts, sampling_params):
            self.calls.append((list(prompt["prompt_token_ids"]), sp))
            text = self.scripts.pop(0)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            finish, stop_reason = "length", None
            decoded = ""
            for n in range(1, len(ids) + 1):
                decoded = self.tokenizer.decode(ids[:n])
                hit = next((s for s in sp.stop if s in decoded), None)
                if hit:
                    ids, finish, stop_reason = ids[:n], "stop", hit
                    break
            if finish == "length" and text.endswith("<|im_end|>"):
                finish = "stop"
            ids = ids[: sp.max_tokens]
            logprobs = [{t: Logprob(-0.1), t + 1: Logprob(-2.5)} for t in ids] if sp.logprobs is not None else None
            if logprobs is not None and getattr(sp, "flat_logprobs", False):
                logprobs = FakeFlatLogprobs(logprobs)
            completion = types.SimpleNamespace(
                token_ids=ids, logprobs=logprobs, finish_reason=finish, stop_reason=stop_reason
            )
            outs.append(types.SimpleNamespace(outputs=[completion]))
        return outs

    def sleep(self, level=1):
        self.slept += 1

    def wake_up(self):
        self.woke += 1

    def reset_prefix_cache(self):
        self.resets += 1


class FakeSamplingParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "VLLM_ENABLE_V1_MULTIPROCESSING")


@pytest.fixture()
def fake_vllm(monkeypatch):
    # a VLLMEngine built here sets the torchrun variables vLLM's external launcher reads (`external_launcher_env`);
    # recorded first, so that teardown removes them: a RANK left in the environment makes the next Accelerate state
    # of this test worker start a process group
    import os

    for name in LAUNCH_VARIABLES:
        monkeypatch.setenv(name, os.environ.get(name, ""))
        if not os.environ[name]:
            monkeypatch.delenv(name)
    module = types.ModuleType("vllm")
    module.SamplingParams = FakeSamplingParams
    module.LLM = FakeLLM
    monkeypatch.setitem(sys.modules, "vllm", module)
    return module


def test_missing_vllm_message(monkeypatch, tiny_model, tiny_tokenizer):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(ImportError, match=r"pip install -c constraints.txt llamafactory-agentic\[vllm\]"):
        build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config())


def test_vllm_engine_round_and_rollout(fake_vllm, tiny_model, tiny_tokenizer):
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    scripts = ["<search> capital </search> tail", "<answer> Paris </answer><|im_end|>"]
    llm = FakeLLM(tiny_tokenizer, list(scripts))
    config = default_rollout_config(group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=64)
    engine = build_engine("vllm", tiny_model, tiny_tokenizer, config, llm=llm)
    loaded = [pair for call in llm.loaded for pair in call]  # one load_weights call per module
    assert [n for n, _ in loaded] == [n for n, _ in tiny_model.named_parameters()]
    assert llm.resets == 1
    p = tiny_tokenizer.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
    out = AgenticRollout(engine, RecordingExecutor("Page 1: Paris"), tiny_tokenizer, config).rollout([p])
    t = out.groups[0][0]
    first_prompt, sp = llm.calls[0]
    assert first_prompt == p and sp.include_stop_str_in_output and sp.logprobs == 10 and sp.max_tokens == 64
    assert sp.stop == ["</search>", "</python>"] and sp.stop_token_ids == [eos]
    second_prompt, sp2 = llm.calls[1]
    assert second_prompt == p + t.response_ids[: len(second_prompt) - len(p)] and sp2.max_tokens == 64 - (
        len(second_prompt) - len(p)
    )
    assert t.finish_reason == "eos" and t.response_ids[-1] == eos and t.tool_calls[0].content == "capital"
    assert tiny_tokenizer.decode(t.response_ids).count("</search> <result>") == 1
    # entropy: each position pools two log-probs (-0.1, -2.5); 20 leading positions
    per_pos = -(math.exp(-0.1) * -0.1) - (math.exp(-2.5) * -2.5)
    n_first = len(second_prompt) - len(p) - len(rollout_obs(tiny_tokenizer))
    assert t.round_entropies[0] == pytest.approx(
        min(n_first, 20) * per_pos / math.log(len(tiny_tokenizer.get_vocab()))
    )
    engine.release()
    assert llm.slept == 1
    engine.generate([GenerationRequest(0, p, [], 0)], SamplingSettings())
    assert llm.woke == 1


def rollout_obs(tok):
    return tok.encode(" <result>\nPage 1: Paris\n</result>", add_special_tokens=False)


@pytest.mark.parametrize("variant", ["lora", "dora"])
def test_vllm_weight_sync_merges_peft_adapters(fake_vllm, tiny_model, tiny_tokenizer, variant):
    # what reaches vLLM's load_weights for a LoRA policy must be the merged base model: base names, merged values
    import copy

    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    lora = LoraConfig(
        r=4,
        lora_alpha=8,
        target_modules=["q_proj", "v_proj", "up_proj", "down_proj"],
        modules_to_save=["norm"],
        init_lora_weights=False,  # random lora_B: the adapters change the weights
        use_dora=variant == "dora",
    )
    peft_model = get_peft_model(tiny_model, lora)
    with torch.no_grad():  # the trained copy of the modules_to_save module differs from the frozen original
        peft_model.base_model.model.model.norm.modules_to_save["default"].weight.add_(0.5)
    before = {n: p.detach().clone() for n, p in peft_model.named_parameters()}
    ids = torch.tensor([tiny_tokenizer.encode("<search> x </search>")])
    logits_before = peft_model(input_ids=ids).logits

    llm = FakeLLM(tiny_tokenizer, [])
    engine = build_engine("vllm", peft_model, tiny_tokenizer, default_rollout_config(), llm=llm)
    sent = [pair for call in llm.loaded for pair in call]
    names = [n for n, _ in sent]
    assert len(names) == len(set(names))
    assert not any("lora_" in n or "base_layer" in n or "base_model" in n or "modules_to_save" in n for n in names)
    assert not any("original_module" in n for n in names)

    merged = copy.deepcopy(peft_model).merge_and_unload()
    expected = merged.state_dict()
    assert set(names) == {n for n, _ in merged.named_parameters()}
    assert set(expected) - set(names) <= {"lm_head.weight"}  # tied to embed_tokens: sent once
    for name, value in sent:
        torch.testing.assert_close(value, expected[name], rtol=0, atol=1e-6, msg=name)
    q_name = "model.layers.0.self_attn.q_proj.weight"
    base_q = before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.allclose(dict(sent)[q_name], base_q)  # the adapter really was merged in
    trained_norm = before["base_model.model.model.norm.modules_to_save.default.weight"]
    torch.testing.assert_close(dict(sent)["model.norm.weight"], trained_norm)

    # the policy itself is unchanged, bit for bit, and its adapters are not left merged
    after = dict(peft_model.named_parameters())
    assert set(after) == set(before) and all(torch.equal(after[n], before[n]) for n in before)
    assert not any(getattr(m, "merged", False) for m in peft_model.modules())
    torch.testing.assert_close(peft_model(input_ids=ids).logits, logits_before, rtol=0, atol=0)

    calls = len(llm.loaded)
    engine.set_model(peft_model)  # a second sync (next optimiser step) sends the same tensors again
    again = [pair for call in llm.loaded[calls:] for pair in call]
    assert [n for n, _ in again] == names and llm.resets == 2
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(again, sent))


class ContractLLM(FakeLLM):
    """Built by the engine itself (records the `vllm.LLM` kwargs) and honours vLLM's `logprobs_mode` contract.

    Every position has the same 4 logits; the returned log-probs are `log_softmax(logits)` under vLLM's default
    `raw_logprobs` and `log_softmax(logits / temperature)` under `processed_logprobs` (vLLM >= 0.10.1; no top-k /
    top-p here). The sampled token is the most likely one, so the top-k dict holds exactly those 4 values.
    """

    LOGITS = (2.0, 1.0, 0.5, -1.0)
    built: list = []

    def __init__(self, **kwargs):
        super().__init__(None, [], **kwargs)
        ContractLLM.built.append(kwargs)

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        import torch

        outs = []
        for prompt, sp in zip(prompts, sampling_params):
            self.calls.append((list(prompt["prompt_token_ids"]), sp))
            logits = torch.tensor(self.LOGITS)
            if self.kwargs.get("logprobs_mode", "raw_logprobs") == "processed_logprobs" and sp.temperature > 0:
                logits = logits / sp.temperature
            values = torch.log_softmax(logits, -1).tolist()
            ids = list(range(10, 10 + sp.max_tokens))
            logprobs = [{tok + k: Logprob(v) for k, v in enumerate(values)} for tok in ids]
            completion = types.SimpleNamespace(
                token_ids=ids, logprobs=logprobs, finish_reason="length", stop_reason=None
            )
            outs.append(types.SimpleNamespace(outputs=[completion]))
        return outs


@pytest.mark.parametrize("temperature", [0.6, 1.0, 1.5])
def test_vllm_entropy_is_that_of_the_sampling_distribution(fake_vllm, tiny_model, tiny_tokenizer, temperature):
    """Issue 8 item 5: without `logprobs_mode` vLLM returns untempered log-probs, so at T != 1 the round entropy was
    not that of the distribution sampled from (the hf engine's)."""
    import torch

    from llamafactory_agentic.rollout.branching import full_entropy_terms

    fake_vllm.LLM = ContractLLM
    ContractLLM.built.clear()
    engine = build_engine(
        "vllm", tiny_model, tiny_tokenizer, default_rollout_config(max_prompt_length=64, max_response_length=32)
    )
    (kwargs,) = ContractLLM.built
    assert kwargs["logprobs_mode"] == "processed_logprobs"
    assert kwargs["max_model_len"] == 96 and kwargs["enable_prefix_caching"] and kwargs["seed"] == 0
    settings = SamplingSettings(temperature=temperature, stop_strings=(), entropy_tokens=5)
    out = engine.generate([GenerationRequest(0, [1, 2, 3], [], 5)], settings)[0]
    expected = full_entropy_terms(torch.log_softmax(torch.tensor(ContractLLM.LOGITS) / temperature, -1)).item()
    assert out.entropy_terms == pytest.approx([expected] * 5, rel=1e-5)
    if temperature != 1.0:  # the untempered entropy is measurably different
        raw = full_entropy_terms(torch.log_softmax(torch.tensor(ContractLLM.LOGITS), -1)).item()
        assert abs(raw - expected) > 1e-2


def test_vllm_logprobs_mode_cannot_be_overridden(fake_vllm, tiny_model, tiny_tokenizer):
    fake_vllm.LLM = ContractLLM
    with pytest.raises(ValueError, match="logprobs_mode='processed_logprobs'"):
        build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config(), logprobs_mode="raw_logprobs")
    llm = ContractLLM()
    llm.llm_engine.model_config = types.SimpleNamespace(logprobs_mode="raw_logprobs")  # an engine built elsewhere
    with pytest.raises(ValueError, match="was built with logprobs_mode='raw_logprobs'"):
        build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config(), llm=llm)


def test_vllm_engine_sets_the_external_launcher_variables_a_plain_launch_lacks(
    fake_vllm, monkeypatch, tiny_model, tiny_tokenizer
):
    """vLLM 0.22's `external_launcher` executor reads `os.environ["RANK"]` and `["LOCAL_RANK"]` and joins `env://`
    (vllm/v1/executor/uniproc_executor.py): one GPU without torchrun had none of them (`KeyError: 'RANK'` at start).
    The fake LLM records the environment it was built in; values a launcher set are kept."""
    import os

    seen = {}

    class RecordingLLM(FakeLLM):
        def __init__(self, **kwargs):
            names = (
                "RANK",
                "LOCAL_RANK",
                "WORLD_SIZE",
                "MASTER_ADDR",
                "MASTER_PORT",
                "VLLM_ENABLE_V1_MULTIPROCESSING",
            )
            seen.update({name: os.environ.get(name) for name in names})
            super().__init__(tiny_tokenizer, [], **kwargs)

    fake_vllm.LLM = RecordingLLM
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)  # a plain launch (the fixture restores the environment after)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    tiny_model.config._name_or_path = "tiny"
    engine = build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config())
    assert engine.llm.kwargs["distributed_executor_backend"] == "external_launcher"
    assert seen["RANK"] == "0" and seen["LOCAL_RANK"] == "0" and seen["WORLD_SIZE"] == "1"
    assert seen["MASTER_ADDR"] == "127.0.0.1" and int(seen["MASTER_PORT"]) > 0

    monkeypatch.setenv("RANK", "3")  # a launcher's values win
    monkeypatch.setenv("MASTER_PORT", "29517")
    build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config())
    assert seen["RANK"] == "3" and seen["MASTER_PORT"] == "29517"


def test_vllm_engine_asks_for_flat_log_probs_and_only_the_sampled_one_without_entropy(
    fake_vllm, tiny_model, tiny_tokenizer
):
    """The engine asks vLLM for its flat log-prob container (a constant number of Python objects per request; vLLM's
    dict per position cost 153 us per position against 89 flat on the 2-core development machine,
    `benchmarks/bench_vllm_logprobs_cpu.py`) and reads it by index; with `entropy_tokens` 0 it asks only for the
    sampled token's log-prob (`logprobs=0`, the behaviour log-prob of issue 36; before: None) and a zero-position
    slice of the flat container, which raises in vLLM, is never taken. Fake vLLM: vLLM needs a GPU."""
    text = "<answer> Paris </answer> and more text"
    p = tiny_tokenizer.encode("<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n")
    llm = FakeLLM(tiny_tokenizer, [text, text])
    engine = build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config(), llm=llm)
    request = GenerationRequest(0, p, [], 64)

    out = engine.generate([request], SamplingSettings(entropy_tokens=5))[0]
    sp = llm.calls[0][1]
    assert sp.flat_logprobs is True and sp.logprobs == SamplingSettings().entropy_topk
    per_pos = -(math.exp(-0.1) * -0.1) - (math.exp(-2.5) * -2.5)
    assert len(out.token_ids) > 5 and out.entropy_terms == pytest.approx([per_pos] * 5)

    assert out.logprobs == [-0.1] * len(out.token_ids) and out.weight_version == 0

    engine.weight_version = 4  # RolloutSession.sync_weights(model, version=4)
    out = engine.generate([request], SamplingSettings(entropy_tokens=0))[0]
    assert llm.calls[1][1].logprobs == 0
    assert out.entropy_terms == [] and out.token_ids
    assert out.logprobs == [-0.1] * len(out.token_ids) and out.weight_version == 4


@pytest.mark.slow
def test_missing_vllm_is_named_before_the_model_loads(tmp_path, tiny_model_dir):
    """Issue 34 low: `arpo_rollout_backend: vllm` without vLLM printed its install hint only after the policy (and
    the reference model) had loaded. The real `llamafactory-cli train` now stops before loading anything."""
    import json
    import os
    import subprocess
    from pathlib import Path

    if "vllm" in sys.modules or __import__("importlib").util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the hint is for machines without it")
    repo = Path(__file__).resolve().parents[2]
    bin_dir = Path(sys.executable).parent
    data = tmp_path / "data"
    data.mkdir()
    (data / "dataset_info.json").write_text(json.dumps({"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}}))
    row = {"prompt": [{"role": "user", "content": "What is 1 + 2?"}], "reward_model": {"ground_truth": "3"}}
    (data / "rl.jsonl").write_text(json.dumps(row) + "\n")
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", CUDA_VISIBLE_DEVICES="")
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    proc = subprocess.run(
        [str(bin_dir / "llamafactory-cli"), "train", str(repo / "recipes/tiny/arpo_cpu.yaml"),
         f"model_name_or_path={tiny_model_dir}", f"dataset_dir={data}", "dataset=rl", "eval_dataset=null",
         "eval_strategy='no'", f"output_dir={tmp_path / 'out'}", "arpo_rollout_backend=vllm", "max_steps=1",
         f"agentic_cache_path={tmp_path / 'tool_cache.sqlite'}", "agentic_search_backend=replay"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "The vllm rollout backend needs vLLM" in output, output[-3000:]
    assert "trainable params" not in output, output[-3000:]  # LLaMA-Factory's line once the model is loaded
