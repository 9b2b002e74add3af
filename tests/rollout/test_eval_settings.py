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

"""The rollout's evaluation settings (docs/algorithms.md §9): `</answer>` and `<result>` stop strings, per-round token cap,
per-tool limits and repeated-query notices, repetition penalty, per-trajectory timeout, engine errors and the
continuous-batching `stream` loop.

A prompt-scripted engine stands in for a policy that writes tool calls on purpose (a random tiny model never does);
the repetition penalty is checked on the real tiny model against transformers' own `generate`.
"""

import sys
import time
import types
from dataclasses import replace

import pytest
import torch

from llamafactory_agentic.rollout import (
    AgenticRollout,
    GenerationEngine,
    GenerationRequest,
    GenerationResult,
    SamplingSettings,
    build_engine,
)
from llamafactory_agentic.rollout.agent_loop import limit_notice_text, repeat_notice_text
from llamafactory_agentic.rollout.hf_engine import HFEngine
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import RecordingExecutor
from .test_hf_engine import prompt, sharpen
from .test_vllm_engine import FakeLLM, FakeSamplingParams


EVAL_STOPS = ("</search>", "</python>", "</answer>", "<result>")


class PromptScriptedEngine(GenerationEngine):
    """Round r of the trajectory whose prompt ends with question `q` returns `scripts[q][r]`.

    A script entry is `(text, finish)`: `stop` (text ends with a stop string), `eos` (EOS appended), `length` (text
    cut to max_tokens) or `error`. Records every request and can sleep per call.
    """

    def __init__(self, tokenizer, scripts, eos, sleep_s=0.0):
        self.tok, self.scripts, self.eos, self.sleep_s = tokenizer, scripts, eos, sleep_s
        self.requests, self.batches, self.rounds = [], [], {}

    def generate(self, requests, sampling):
        time.sleep(self.sleep_s)
        self.batches.append([r.key for r in requests])
        out = []
        for req in requests:
            self.requests.append(replace(req, response_ids=list(req.response_ids)))
            question = self.tok.decode(req.prompt_ids).split("user\n")[-1].split("<|im_end|>")[0]
            r = self.rounds.get(req.key, 0)
            self.rounds[req.key] = r + 1
            text, finish = self.scripts[question][min(r, len(self.scripts[question]) - 1)]
            if finish == "error":
                out.append(GenerationResult(token_ids=[], finish_reason="error", error="HTTP 500"))
                continue
            ids = self.tok.encode(text, add_special_tokens=False)
            stop = None
            if finish == "stop":
                stop = next(s for s in sampling.stop_strings if text.endswith(s))
            elif finish == "eos":
                ids = ids + [self.eos]
            if len(ids) > req.max_tokens:
                ids, finish, stop = ids[: req.max_tokens], "length", None
            out.append(GenerationResult(token_ids=ids, finish_reason=finish, stop_string=stop))
        return out


def ask(tok, question):
    return tok.encode(f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n")


def run_stream(tok, scripts, max_in_flight=8, executor=None, sleep_s=0.0, **cfg):
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    cfg.setdefault("max_tool_calls", 10**6)  # the evaluation counts per tool, not combined
    config = default_rollout_config(eos_token_id=eos, stop_strings=EVAL_STOPS, max_response_length=512, **cfg)
    engine = PromptScriptedEngine(tok, scripts, eos, sleep_s=sleep_s)
    executor = executor or RecordingExecutor("Page 1: x")
    rollout = AgenticRollout(engine, executor, tok, config)
    done = {}
    items = [(q, ask(tok, q), None) for q in scripts]
    counters = rollout.stream(items, lambda item, traj: done.__setitem__(item, traj), max_in_flight=max_in_flight)
    return done, engine, executor, counters


def text_of(tok, traj):
    return tok.decode(traj.response_ids, skip_special_tokens=False)


def test_answer_stop_ends_the_trajectory_without_eos(tiny_tokenizer):
    done, _, _, _ = run_stream(tiny_tokenizer, {"q": [("<think> a </think> <answer> \\boxed{1} </answer>", "stop")]})
    traj = done["q"]
    assert traj.finish_reason == "answer" and text_of(tiny_tokenizer, traj).endswith("</answer>")
    assert tiny_tokenizer.convert_tokens_to_ids("<|im_end|>") not in traj.response_ids


def test_self_written_result_is_dropped_and_generation_continues(tiny_tokenizer):
    scripts = {
        "q": [
            ("<think> I know it </think> <result>", "stop"),
            ("<answer> \\boxed{2} </answer>", "stop"),
        ]
    }
    done, engine, _, counters = run_stream(tiny_tokenizer, scripts)
    traj = done["q"]
    text = text_of(tiny_tokenizer, traj)
    assert "<result>" not in text and text.startswith("<think> I know it </think>")
    assert text.endswith("<answer> \\boxed{2} </answer>") and traj.finish_reason == "answer"
    # the second round continued from the kept text (the engine saw the cut response), nothing was masked
    second = [r for r in engine.requests if r.key == 0][1]
    assert tiny_tokenizer.decode(list(second.response_ids)).rstrip().endswith("</think>")
    assert all(traj.loss_mask) and counters["self_results"] == 1


def test_self_result_streak_ends_the_trajectory(tiny_tokenizer):
    done, engine, _, _ = run_stream(
        tiny_tokenizer, {"q": [("<think> a </think> <result>", "stop")]}, self_result_retries=2
    )
    assert done["q"].finish_reason == "self_result" and engine.rounds[0] == 3


def test_per_tool_limits_and_repeat_notices(tiny_tokenizer):
    script = [
        ("<python> print(1) </python>", "stop"),
        ("<python> print(2) </python>", "stop"),
        ("<python> print(3) </python>", "stop"),  # third python call: past the limit of 2
        ("<search> capital of  France </search>", "stop"),
        ('<search> "capital of France" </search>', "stop"),  # same query once normalised (quotes, spaces)
        ("<search> capital of Italy </search>", "stop"),
        ("<answer> \\boxed{Rome} </answer>", "stop"),
    ]
    done, _, executor, counters = run_stream(
        tiny_tokenizer,
        {"q": script},
        tool_call_limits={"python": 2, "search": 10},
        repeat_notice_tools=("search",),
    )
    traj = done["q"]
    statuses = [(c.tool, c.status) for c in traj.tool_calls]
    assert statuses == [
        ("python", "ok"),
        ("python", "ok"),
        ("python", "limit"),
        ("search", "ok"),
        ("search", "repeat"),
        ("search", "ok"),
    ]
    assert [c.content for c in executor.calls] == ["print(1)", "print(2)", "capital of  France", "capital of Italy"]
    text = text_of(tiny_tokenizer, traj)
    assert f" <result>\n{limit_notice_text('python', 2)}\n</result>" in text
    assert f" <result>\n{repeat_notice_text('search')}\n</result>" in text
    assert traj.finish_reason == "answer" and counters["limit_notices"] == 1 and counters["repeat_notices"] == 1


def test_round_token_cap_and_total_budget(tiny_tokenizer):
    long_text = "<think> " + "a b c d e f " * 20 + "</think>"
    done, engine, _, _ = run_stream(
        tiny_tokenizer,
        {"q": [("<search> x </search>", "stop"), (long_text, "length")]},
        max_round_tokens=16,
    )
    requests = [r for r in engine.requests if r.key == 0]
    assert [r.max_tokens for r in requests] == [16, 16]
    assert done["q"].finish_reason == "round_length" and done["q"].generated_tokens <= 32


def test_timeout_and_engine_error(tiny_tokenizer):
    scripts = {
        "slow": [("<search> again </search>", "stop")],  # never answers
        "broken": [("", "error")],
    }
    done, _, _, _ = run_stream(tiny_tokenizer, scripts, sleep_s=0.05, trajectory_timeout_s=0.3)
    assert done["slow"].finish_reason == "timeout" and len(done["slow"].tool_calls) >= 2
    assert done["broken"].finish_reason == "error" and done["broken"].error == "HTTP 500"


def test_stream_refills_and_reports_in_completion_order(tiny_tokenizer):
    scripts = {f"q{i}": [("<search> s </search>", "stop")] * i + [("<answer> \\boxed{1} </answer>", "stop")]
               for i in range(6)}  # fmt: skip
    order = []
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(
        eos_token_id=eos, stop_strings=EVAL_STOPS, max_response_length=512, max_tool_calls=99
    )
    engine = PromptScriptedEngine(tiny_tokenizer, scripts, eos)
    rollout = AgenticRollout(engine, RecordingExecutor(), tiny_tokenizer, config)
    items = [(q, ask(tiny_tokenizer, q), 7 + i) for i, q in enumerate(scripts)]
    rollout.stream(items, lambda item, traj: order.append((item, traj.finish_reason)), max_in_flight=2)
    assert all(reason == "answer" for _, reason in order) and len(order) == 6
    assert max(len(batch) for batch in engine.batches) == 2
    assert [item for item, _ in order][:2] == ["q0", "q1"]  # the short ones finish first, their places are refilled
    # per-request seeds: derived from the item's seed and the round, different per round
    seeds = [(r.key, r.seed) for r in engine.requests]
    assert all(seed is not None for _, seed in seeds) and len({s for _, s in seeds}) == len(seeds)


def test_training_rollout_sends_no_seed_and_unchanged_budgets(tiny_tokenizer):
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    engine = PromptScriptedEngine(tiny_tokenizer, {"q": [("<answer> \\boxed{1} </answer>", "eos")]}, eos)
    config = default_rollout_config(eos_token_id=eos, group_size=2, initial_rollouts=2, max_response_length=64)
    AgenticRollout(engine, RecordingExecutor(), tiny_tokenizer, config).rollout([ask(tiny_tokenizer, "q")])
    assert all(r.seed is None and r.max_tokens == 64 for r in engine.requests)


def test_hf_repetition_penalty_matches_transformers_generate(tiny_model, tiny_tokenizer):
    model = sharpen(tiny_model, seed=3)
    p = prompt(tiny_tokenizer, "repeat repeat repeat the the the")
    ref = model.generate(
        torch.tensor([p]),
        max_new_tokens=24,
        do_sample=False,
        repetition_penalty=1.3,
        eos_token_id=None,
        pad_token_id=0,
    )[0, len(p) :].tolist()
    plain = model.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert plain[0, len(p) :].tolist() != ref  # the penalty matters for this prompt
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=2, max_context=128)
    s = SamplingSettings(temperature=0.0, stop_strings=(), repetition_penalty=1.3)
    first = engine.generate([GenerationRequest(0, p, [], 10)], s)[0].token_ids
    # a second round continues the same trajectory: the penalty covers the response of the first round too
    second = engine.generate([GenerationRequest(0, p, first, 14)], s)[0].token_ids
    assert first + second == ref


def test_vllm_sampling_params_only_carry_evaluation_settings_when_set(monkeypatch, tiny_model, tiny_tokenizer):
    module = types.ModuleType("vllm")
    module.SamplingParams, module.LLM = FakeSamplingParams, FakeLLM
    monkeypatch.setitem(sys.modules, "vllm", module)
    llm = FakeLLM(tiny_tokenizer, ["<answer> a </answer><|im_end|>"] * 2)
    engine = build_engine("vllm", tiny_model, tiny_tokenizer, default_rollout_config(), llm=llm)
    p = prompt(tiny_tokenizer)
    engine.generate([GenerationRequest(0, p, [], 8)], SamplingSettings())
    engine.generate([GenerationRequest(1, p, [], 8, seed=11)], SamplingSettings(repetition_penalty=1.1))
    default, evaluation = llm.calls[0][1], llm.calls[1][1]
    assert not hasattr(default, "repetition_penalty") and not hasattr(default, "seed")
    assert evaluation.repetition_penalty == 1.1 and evaluation.seed == 11


def test_config_validation():
    with pytest.raises(ValueError, match="max_round_tokens"):
        default_rollout_config(max_round_tokens=0)
    with pytest.raises(ValueError, match="tool_call_limits"):
        default_rollout_config(tool_call_limits={"python": -1})
    with pytest.raises(ValueError, match="repetition_penalty"):
        default_rollout_config(repetition_penalty=0.0)
