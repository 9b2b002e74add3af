# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The rollout session (issue 26 item 3): one factory, one interface over agent loop, engine and tool executor.

The agent loop and the tool executor are real (the python tool runs its code in a subprocess); the policy is a
scripted engine so that the test controls what the model writes.
"""

import random
from types import SimpleNamespace

from llamafactory_agentic.rollout.session import RolloutSession, as_session, open_rollout_session
from llamafactory_agentic.tools import build_executor_from_args
from llamafactory_agentic.train.arpo.config import default_rollout_config
from rollout.helpers import ScriptedEngine


TOOL_KEYS = {"agentic_tool_workers": 1, "agentic_python_timeout": 20, "agentic_cache_path": None}
ROUNDS = ["<think> add </think><python>print(1 + 2)</python>", "<answer> \\boxed{3} </answer>"]


class CountingEngine(ScriptedEngine):
    """Scripted engine with `HFEngine`-style counters in `stats` (one decode step per request)."""

    def __init__(self, tokenizer, plan, eos):
        super().__init__(tokenizer, plan, eos)
        keys = ("prefill_s", "decode_s", "decode_device_s", "capture_s", "idle_s", "decode_row_steps")
        self.stats = dict.fromkeys(("decode_steps", *keys, "decode_batch_steps", "decode_kv_steps"), 0.0)
        self.models = []

    def generate(self, requests, sampling):
        self.stats["decode_steps"] += len(requests)
        self.stats["decode_s"] += 0.5 * len(requests)
        return super().generate(requests, sampling)

    def set_model(self, model):
        self.models.append(model)


def _setup(tokenizer):
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(
        group_size=1, initial_rollouts=1, max_prompt_length=64, max_response_length=200, eos_token_id=eos
    )
    engine = CountingEngine(tokenizer, lambda r: (ROUNDS[r], "stop" if r == 0 else "eos", 0.5), eos)
    prompt = tokenizer.encode("<|im_start|>user\n1 + 2?<|im_end|>\n<|im_start|>assistant\n")
    return config, engine, prompt


def test_a_session_built_from_tool_keys_rolls_out_reports_and_closes_its_executor(tiny_tokenizer):
    config, engine, prompt = _setup(tiny_tokenizer)
    session = open_rollout_session(config, tiny_tokenizer, tools=TOOL_KEYS, engine=engine)
    assert session.backend == "hf" and session.lora_merge == "gpu" and session.engine is engine
    try:
        session.sync_weights("policy")
        output = session.rollout([prompt], training=False)
        (traj,) = output.groups[0]
        assert traj.num_tool_calls == 1 and engine.models == ["policy"]
        # the engine's decode timing between the two snapshots of `stats` (hf_engine.decode_metrics)
        assert output.timing["time/decode"] == 1.0 and output.timing["perf/decode_rows"] == 0.0
        metrics = session.pop_metrics()
        assert metrics["tools/python/calls"] == 1
        assert session.pop_metrics().get("tools/python/calls", 0) == 0  # popped
    finally:
        session.close()
    assert session.executor._closed  # the session built it, so the session closed it
    session.close()  # a second close is a no-op


def test_a_passed_executor_stays_open_and_the_closer_runs_once(tiny_tokenizer):
    config, engine, prompt = _setup(tiny_tokenizer)
    closed = []
    with build_executor_from_args(SimpleNamespace(**TOOL_KEYS)) as executor:
        session = open_rollout_session(
            config, tiny_tokenizer, tools=executor, engine=engine, closer=lambda: closed.append(1)
        )
        session.rollout([prompt], training=False)
        session.close()
        session.close()
        assert closed == [1] and not executor._closed
        assert executor.pop_metrics()["tools/python/calls"] == 1


def test_the_session_saves_and_restores_the_rollouts_random_draws(tiny_tokenizer, tmp_path):
    config, engine, _ = _setup(tiny_tokenizer)
    with build_executor_from_args(SimpleNamespace(**TOOL_KEYS)) as executor:
        session = open_rollout_session(config, tiny_tokenizer, tools=executor, engine=engine)
        log_rng = random.Random(3)
        session.save_rng_state(str(tmp_path), 0, log_rng)
        expected = (session.agent.rng.random(), log_rng.random())
        assert session.restore_rng_state(str(tmp_path), 0, log_rng)
        assert (session.agent.rng.random(), log_rng.random()) == expected
        assert not session.restore_rng_state(str(tmp_path / "missing"), 0, log_rng)


def test_as_session_wraps_an_agent_loop_once():
    class Loop:
        def rollout(self, prompts, training=True):
            raise AssertionError("not called")

    session = as_session(Loop(), executor=None)
    assert isinstance(session, RolloutSession) and as_session(session) is session
    assert session.backend == "hf" and session.engine is None and session.pop_metrics() == {}
    session.sync_weights("ignored")  # no engine: nothing to push
