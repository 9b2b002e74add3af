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

"""`hf` engine tests on the real tiny Qwen2 model: KV-prefix reuse, stop strings, EOS, budgets, and a full rollout with
the real python tool running in a subprocess."""

import pytest
import torch

from llamafactory_agentic.rollout import (
    AgenticRollout,
    GenerationRequest,
    SamplingSettings,
    StopStringMatcher,
    build_engine,
)
from llamafactory_agentic.rollout.branching import full_entropy_terms
from llamafactory_agentic.rollout.hf_engine import HFEngine
from llamafactory_agentic.train.arpo.config import default_rollout_config


def sharpen(model, std=0.15, seed=0):
    """Random weights with a larger scale, so next-token distributions are peaked and differ by context."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, std)
    return model


class ForcedModel(torch.nn.Module):
    """Runs the real model (so the slot KV cache is exercised) and adds +100 to a scripted token per absolute
    position (the prompt length is subtracted), making the output deterministic text."""

    def __init__(self, model, prompt_len, target):
        super().__init__()
        self.inner = model
        self.config = model.config
        self.prompt_len = prompt_len
        self.target = target

    def forward(self, **kwargs):
        out = self.inner(**kwargs)
        pos = kwargs["position_ids"][:, -1] - self.prompt_len + 1
        for b, p in enumerate(pos.tolist()):
            if 0 <= p < len(self.target):
                out.logits[b, -1, self.target[p]] += 100.0
        return out


def prompt(tok, text="What is 1+2?"):
    return tok.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n")


def reference_terms(model, ids, n):
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return full_entropy_terms(torch.log_softmax(logits, -1))[len(ids) - n - 1 : len(ids) - 1]


@pytest.mark.parametrize("prefix_cache", [True, False])
def test_kv_reuse_matches_fresh_prefill(tiny_model, tiny_tokenizer, prefix_cache):
    model = sharpen(tiny_model)
    engine = HFEngine(
        model,
        tiny_tokenizer,
        max_batch_size=4,
        max_context=256,
        seed=0,
        prefix_cache=prefix_cache,
        length_bucket=16,
        prefill_chunk=7,
    )
    p = prompt(tiny_tokenizer)
    s = SamplingSettings(temperature=1.0, eos_token_ids=(), entropy_source="full", entropy_tokens=100, stop_strings=())
    first = engine.generate([GenerationRequest(i, p, [], 12 + i) for i in range(3)], s)
    obs = tiny_tokenizer.encode(" <result>\nhello\n</result>", add_special_tokens=False)
    resp = [o.token_ids for o in first]
    # continue 0 and 1, branch 3 from 0 and 5 from 2, new global 4: 5 requests on 4 slots -> the fifth is admitted
    # into the first slot that frees up (continuous refill)
    second_req = [
        GenerationRequest(0, p, resp[0] + obs, 10),
        GenerationRequest(1, p, resp[1] + obs, 10),
        GenerationRequest(3, p, resp[0] + obs, 10, parent_key=0),
        GenerationRequest(4, p, [], 10),
        GenerationRequest(5, p, resp[2] + obs, 10, parent_key=2),
    ]
    second = engine.generate(second_req, s)
    for req, out in list(zip(second_req, second)) + [(GenerationRequest(i, p, [], 0), first[i]) for i in range(3)]:
        ids = list(req.prompt_ids) + list(req.response_ids) + out.token_ids
        ref = reference_terms(model, ids, len(out.token_ids))
        assert torch.allclose(ref, torch.tensor(out.entropy_terms), atol=1e-4), (req.key, ref, out.entropy_terms)
    assert engine.stats["admissions"] >= 3
    assert (engine.stats["copied_tokens"] > 0) == prefix_cache


def sampling_log_probs(logits, temperature, top_k=0, top_p=1.0):
    """Log-probs of the distribution a token is sampled from: logits / T, then top-k / top-p, renormalised."""
    logits = logits / temperature
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        sorted_logits = sorted_logits.masked_fill(probs.cumsum(-1) - probs > top_p, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return torch.log_softmax(logits, dim=-1)


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "source"),
    [
        (0.6, 0, 1.0, "full"),
        (1.7, 0, 1.0, "full"),
        (0.6, 0, 1.0, "topk"),
        (1.3, 5, 1.0, "full"),
        (0.8, 0, 0.7, "topk"),
    ],
)
def test_round_entropy_is_that_of_the_sampling_distribution(
    tiny_model, tiny_tokenizer, temperature, top_k, top_p, source
):
    """Issue 8 item 5: at T != 1 (and with top-k / top-p) the entropy terms come from the distribution sampled from,
    softmax of the filtered logits / T, as vLLM's `logprobs_mode="processed_logprobs"` returns them."""
    from llamafactory_agentic.rollout.branching import topk_entropy_terms

    model = sharpen(tiny_model, std=0.05, seed=2)
    p = prompt(tiny_tokenizer)
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=2, max_context=128, seed=0)
    settings = SamplingSettings(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        eos_token_ids=(),
        stop_strings=(),
        entropy_source=source,
        entropy_topk=10,
        entropy_tokens=12,
    )
    out = engine.generate([GenerationRequest(0, p, [], 12)], settings)[0]
    ids = p + out.token_ids
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, len(p) - 1 : len(ids) - 1].float()
    log_probs = sampling_log_probs(logits, temperature, top_k, top_p)
    sampled = torch.tensor(out.token_ids)
    assert torch.isfinite(log_probs.gather(-1, sampled[:, None])).all()  # every sampled token is in the support
    if source == "full":
        expected = full_entropy_terms(log_probs)
    else:
        expected = topk_entropy_terms(log_probs, sampled, 10)
    assert torch.isfinite(expected).all()
    torch.testing.assert_close(torch.tensor(out.entropy_terms), expected, atol=2e-4, rtol=1e-4)
    untempered = full_entropy_terms(torch.log_softmax(logits, -1))
    assert (untempered - full_entropy_terms(log_probs)).abs().max() > 1e-2  # the test can tell the two apart


def test_greedy_matches_model_generate(tiny_model, tiny_tokenizer):
    model = sharpen(tiny_model, seed=1)
    p = prompt(tiny_tokenizer)
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=2, max_context=128)
    out = engine.generate([GenerationRequest(0, p, [], 15)], SamplingSettings(temperature=0.0, stop_strings=()))[0]
    ref = model.generate(torch.tensor([p]), max_new_tokens=15, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert out.token_ids == ref[0, len(p) :].tolist() and out.finish_reason == "length"


@pytest.mark.parametrize("grouped_attention", [True, False])
def test_generation_attention_never_uses_cudnn(tiny_model, tiny_tokenizer, monkeypatch, grouped_attention):
    """Every attention call of the engine (prefill of varying shapes and decode) runs with the cuDNN SDPA backend
    switched off, and the caller's setting is back afterwards.

    cuDNN attention (PyTorch's first choice on H100/H200 with cuDNN > 9.15) builds and keeps a plan per exact shape,
    with device memory outside PyTorch's allocator; the engine's prefills come in new (rows, tokens) shapes at almost
    every admission. No GPU here: the flag is what PyTorch's backend choice reads on a GPU, so it is checked instead.
    """
    sdpa = torch.nn.functional.scaled_dot_product_attention
    seen = []

    def recording_sdpa(query, *args, **kwargs):
        seen.append((tuple(query.shape), torch.backends.cuda.cudnn_sdp_enabled()))
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording_sdpa)
    model = sharpen(tiny_model, seed=2)
    model.config._attn_implementation = "sdpa"
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=3, max_context=96, grouped_attention=grouped_attention)
    s = SamplingSettings(temperature=0.0, stop_strings=())
    before = torch.backends.cuda.cudnn_sdp_enabled()
    requests = [GenerationRequest(i, prompt(tiny_tokenizer, "x" * (i + 1)), [], 3 + 2 * i) for i in range(5)]
    out = engine.generate(requests, s)
    assert [len(o.token_ids) for o in out] == [3, 5, 7, 9, 11]
    assert torch.backends.cuda.cudnn_sdp_enabled() == before
    prefill_shapes = {shape for shape, _ in seen if shape[2] > 1}
    assert len(prefill_shapes) >= 2 and len(seen) > 20  # prefills (several shapes, refills included) and decode steps
    assert not any(enabled for _, enabled in seen)
    # the switch is per engine: cudnn_attention=True leaves PyTorch's choice alone
    seen.clear()
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=3, max_context=96, cudnn_attention=True)
    engine.generate(requests[:1], s)
    assert seen and all(enabled == before for _, enabled in seen)


def test_stop_string_eos_and_budget(tiny_model, tiny_tokenizer):
    p = prompt(tiny_tokenizer)
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    text = "<think> a </think> <search> capital of France </search> more text"
    target = tiny_tokenizer.encode(text, add_special_tokens=False)
    s = SamplingSettings(temperature=1.0, eos_token_ids=(eos,))
    engine = HFEngine(ForcedModel(tiny_model, len(p), target), tiny_tokenizer, max_batch_size=4, max_context=128)
    out = engine.generate([GenerationRequest(0, p, [], 100), GenerationRequest(1, p, [], 5)], s)
    decoded = tiny_tokenizer.decode(out[0].token_ids)
    assert out[0].finish_reason == "stop" and out[0].stop_string == "</search>"
    assert "</search>" in decoded and "</search>" not in tiny_tokenizer.decode(out[0].token_ids[:-1])
    assert out[0].token_ids == target[: len(out[0].token_ids)]
    assert out[1].finish_reason == "length" and out[1].token_ids == target[:5]
    target_eos = tiny_tokenizer.encode("<answer> 3 </answer>", add_special_tokens=False) + [eos] + target
    engine = HFEngine(ForcedModel(tiny_model, len(p), target_eos), tiny_tokenizer, max_batch_size=4, max_context=128)
    out = engine.generate([GenerationRequest(0, p, [], 100)], s)[0]
    assert out.finish_reason == "eos" and out.token_ids == target_eos[: target_eos.index(eos) + 1]


def test_stop_matcher_tail():
    class Tok:
        vocab = {"<": 0, "/": 1, "search": 2, ">": 3, "x": 4, "</search>": 5}

        def get_vocab(self):
            return self.vocab

        def batch_decode(self, seqs, skip_special_tokens=False):
            return [self.decode(s) for s in seqs]

        def decode(self, ids, skip_special_tokens=False):
            inv = {v: k for k, v in self.vocab.items()}
            return "".join(inv[i] for i in ids)

    m = StopStringMatcher(Tok(), ("</search>",))
    assert m.check([4, 0, 1, 2]) is None
    assert m.check([4, 0, 1, 2, 3]) == "</search>"
    assert m.check([4, 5]) == "</search>"
    assert m.check([5, 4]) is None


@pytest.mark.slow
@pytest.mark.parametrize("schedule, slots", [("rounds", 4), ("continuous", 4), ("continuous", 3)])
def test_full_rollout_real_model_and_python_tool(tiny_model, tiny_tokenizer, schedule, slots):
    from llamafactory_agentic.tools.executor import ToolExecutor
    from llamafactory_agentic.tools.python_tool import PythonTool

    p = prompt(tiny_tokenizer)
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    call = tiny_tokenizer.encode("<think> add </think>\n<python> print(1 + 2) </python>", add_special_tokens=False)
    obs = tiny_tokenizer.encode(" <result>\n3\n</result>", add_special_tokens=False)
    answer = tiny_tokenizer.encode(" <answer> \\boxed{3} </answer>", add_special_tokens=False) + [eos]
    target = call + obs + answer
    config = default_rollout_config(
        group_size=4,
        initial_rollouts=2,
        max_response_length=200,
        max_prompt_length=64,
        eos_token_id=eos,
        hf_generation_batch_size=slots,
        seed=0,
        schedule=schedule,
    )
    engine = build_engine("hf", ForcedModel(tiny_model, len(p), target), tiny_tokenizer, config)
    executor = ToolExecutor([PythonTool(timeout_s=30.0)], workers=4)
    try:
        out = AgenticRollout(engine, executor, tiny_tokenizer, config).rollout([p, p])
    finally:
        executor.close()
    assert [len(g) for g in out.groups] == [4, 4]
    for group in out.groups:
        for t in group:
            assert t.response_ids == target, tiny_tokenizer.decode(t.response_ids)
            assert t.loss_mask == [1] * len(call) + [0] * len(obs) + [1] * len(answer)
            assert t.finish_reason == "eos" and t.num_tool_calls == 1
            assert t.tool_calls[0].status == "ok" and t.tool_calls[0].content == "print(1 + 2)"
    assert out.metrics["rollout/masked_tokens"] > 0 and out.timing["time/tools"] > 0


def test_seeded_requests_sample_the_same_tokens_whatever_shares_the_batch(tiny_model, tiny_tokenizer):
    """A request with a seed draws the same tokens alone, in a batch with other requests, in another slot, after
    other generations and with the engine seeded differently (issue 27: a resumed sampled evaluation regenerated
    differently because the `hf` engine ignored per-request seeds and drew from one shared generator)."""
    model = sharpen(tiny_model)
    settings = SamplingSettings(temperature=1.0, top_p=0.95, eos_token_ids=(), stop_strings=(), repetition_penalty=1.1)
    p, q = prompt(tiny_tokenizer), prompt(tiny_tokenizer, "Name a river.")

    def engine(seed):
        return HFEngine(model, tiny_tokenizer, max_batch_size=4, max_context=256, seed=seed, sync_every=3)

    alone = engine(0).generate([GenerationRequest(0, p, [], 20, seed=1234)], settings)[0].token_ids
    busy = engine(7)
    busy.generate([GenerationRequest(9, q, [], 5)], settings)  # the engine's generator has moved on
    batch = [GenerationRequest(1, q, [], 20, seed=99), GenerationRequest(2, q, [], 7), GenerationRequest(3, p, [], 20,
             seed=1234)]  # fmt: skip
    mixed = busy.generate(batch, settings)
    assert mixed[2].token_ids == alone
    other = engine(0).generate([GenerationRequest(0, p, [], 20, seed=4321)], settings)[0].token_ids
    assert other != alone  # the seed matters
    # the noise is a strictly positive, finite Exponential(1) draw
    from llamafactory_agentic.rollout.hf_engine import seeded_exponential_noise

    noise = seeded_exponential_noise(torch.tensor([1, 2**40 + 3]), torch.tensor([5, 6]), 50000)
    assert torch.isfinite(noise).all() and (noise > 0).all() and abs(noise.mean().item() - 1.0) < 0.02
