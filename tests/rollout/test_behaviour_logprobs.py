# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The hf engine's behaviour log-probs equal a teacher-forced forward on the same weights (issue 36, Deliver 2).

Tolerance: fp32 on CPU, absolute 2e-5 nats per token. The engine decodes with a KV cache (prefill chunks, one-token
decode steps, copied prefix rows for branches) while the reference runs one full forward over prompt + response, so
the two differ only by the order of float additions (measured: at most a few 1e-6 here). In bf16 the same comparison
is dominated by bf16's 8-bit mantissa (about 1e-2 nats); the trainer does not compare them at staleness 0 (the
correction is exactly 1 there, docs/algorithms.md §13).
"""

import math
import sys
from pathlib import Path

import pytest
import torch

from llamafactory_agentic.rollout import AgenticRollout, GenerationRequest, SamplingSettings
from llamafactory_agentic.rollout.hf_engine import HFEngine
from llamafactory_agentic.train.arpo.config import default_rollout_config

from .helpers import RecordingExecutor


ATOL = 2e-5


def teacher_forced(model, prompt, response, temperature):
    ids = torch.tensor([list(prompt) + list(response)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float() / temperature
    logps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logps.gather(-1, torch.tensor(response)[:, None])[:, 0]


def test_engine_logprobs_equal_a_teacher_forced_forward(tiny_model, tiny_tokenizer):
    """Before: `GenerationResult` had no log-probs (the trainer recomputed them from the current weights)."""
    torch.manual_seed(0)
    model = tiny_model.float().eval()
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=4, seed=0)
    engine.weight_version = 7
    prompt = tiny_tokenizer.encode("<|im_start|>user\nWhat is 1 + 2?<|im_end|>\n<|im_start|>assistant\n")
    prefix = tiny_tokenizer.encode(" <think> Let me", add_special_tokens=False)
    requests = [
        GenerationRequest(0, prompt, [], 20),
        GenerationRequest(1, prompt, prefix, 20),  # continues a response (a later round)
        GenerationRequest(2, prompt[:-3], [], 20, seed=11),  # a seeded request
    ]
    for temperature in (1.0, 0.7):
        sampling = SamplingSettings(temperature=temperature, stop_strings=(), eos_token_ids=())
        for req, res in zip(requests, engine.generate(requests, sampling)):
            assert len(res.logprobs) == len(res.token_ids) == 20 and res.weight_version == 7
            want = teacher_forced(model, req.prompt_ids, list(req.response_ids) + res.token_ids, temperature)
            got = torch.tensor(res.logprobs)
            assert torch.allclose(got, want[len(req.response_ids) :], atol=ATOL), (got - want).abs().max()


@pytest.mark.slow  # fits a tool-calling policy first (60 steps)
def test_trajectory_behaviour_logprobs_follow_tokens_branches_and_observations(tiny_tokenizer, tmp_path, arpo_data):
    """A real multi-round rollout with tool calls and branches: every sampled token carries its log-prob (equal to
    the teacher-forced one of the whole trajectory, copied prefixes of branches included), observations and the EOS
    appended at the call limit carry NaN, and the trajectory carries the engine's weight version."""
    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM

    from llamafactory_agentic.testing import build_tiny_model

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))
    from _helpers import fit_tool_policy, render_qwen_prompt  # the trainer tests' tool-calling policy

    rows = pq.read_table(arpo_data / "arpo" / "rl" / "train_10k.parquet").slice(0, 4).to_pylist()
    fit_tool_policy(build_tiny_model(tmp_path / "tiny"), tmp_path / "policy", rows, steps=60, context=48)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "policy")).float().eval()
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(
        eos_token_id=eos, group_size=4, initial_rollouts=2, max_response_length=64, max_tool_calls=1, seed=0
    )
    engine = HFEngine(model, tiny_tokenizer, max_batch_size=8, seed=0)
    engine.weight_version = 3
    agent = AgenticRollout(engine, RecordingExecutor("3"), tiny_tokenizer, config)
    prompts = [tiny_tokenizer.encode(render_qwen_prompt(r), add_special_tokens=False)[-48:] for r in rows[:2]]
    with torch.no_grad():
        output = agent.rollout(prompts, training=True)
    trajs = [t for g in output.groups for t in g]
    assert any(t.is_branch for t in trajs) and any(t.num_tool_calls for t in trajs)
    for traj in trajs:
        assert len(traj.behaviour_logps) == len(traj.response_ids) and traj.weight_version == 3
        want = teacher_forced(model, traj.prompt_ids, traj.response_ids, config.temperature)
        for pos, (value, mask) in enumerate(zip(traj.behaviour_logps, traj.loss_mask)):
            if mask == 0:  # an observation token
                assert math.isnan(value), (traj.uid, pos, value)
            elif traj.hit_call_limit and pos == len(traj.response_ids) - 1 and math.isnan(value):
                pass  # the EOS the loop appends at the call limit (a trajectory that ran into its length budget
                # there ends on a sampled token instead, which carries its log-prob like any other)
            else:
                assert abs(value - float(want[pos])) <= ATOL, (traj.uid, pos, value, float(want[pos]))
