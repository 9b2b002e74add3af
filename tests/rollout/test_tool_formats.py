# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Tool calls come from the configured tools (issue 28 items 1 and 3).

Inline tags: a `module:Class` tool of a tool config (`calc_tool:CalcTool`, tag `<calc>`) is a stop string of the
rollout and is called through the real `ToolExecutor` (before: the rollout stopped on `</search>` and `</python>` only,
so `<calc>` never ended a round and was never run). Native calls: Qwen's `<tool_call>` JSON turn is parsed with
LLaMA-Factory's tool extractor, executed, and the template's tool message is inserted with mask 0.

The engine is scripted (it writes a fixed text per round, cut at the first stop string the rollout sends it, as a
real engine stops) because the tiny random model writes no tool call by itself; the tools and the executor are real.
"""

from pathlib import Path

import pytest

from llamafactory_agentic.rollout import AgenticRollout, GenerationEngine, GenerationResult
from llamafactory_agentic.train.arpo.config import default_rollout_config


HERE = Path(__file__).resolve().parent


class TextEngine(GenerationEngine):
    """Round r writes `texts[r]`, cut right after the first stop string in it (as an engine stops); else text + EOS."""

    def __init__(self, tokenizer, texts, eos):
        self.tokenizer, self.texts, self.eos = tokenizer, list(texts), eos
        self.stop_strings_seen = None

    def generate(self, requests, sampling):
        self.stop_strings_seen = tuple(sampling.stop_strings)
        text = self.texts.pop(0)
        hits = [(text.find(s) + len(s), s) for s in sampling.stop_strings if s in text]
        if hits:
            end, stop = min(hits)
            ids = self.tokenizer.encode(text[:end], add_special_tokens=False)
            return [GenerationResult(token_ids=ids, finish_reason="stop", stop_string=stop)]
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eos]
        return [GenerationResult(token_ids=ids, finish_reason="eos")]


@pytest.fixture()
def calc_executor(tmp_path, monkeypatch):
    from llamafactory_agentic.tools import build_executor_from_args
    from llamafactory_agentic.train.arpo.config import ToolsConfig

    monkeypatch.syspath_prepend(str(HERE.parent / "train"))
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: python\n  - name: calc_tool:CalcTool\n    tag: calc\n")
    args = ToolsConfig(
        agentic_tool_config=str(config),
        agentic_tool_retries=1,
        agentic_tool_workers=2,
        agentic_python_timeout=10.0,
        agentic_python_max_output_chars=2000,
        agentic_python_isolation="auto",
        agentic_python_min_isolation=None,
        agentic_search_backend="local",
        agentic_search_index=None,
        agentic_search_topk=3,
        agentic_search_snippet_chars=200,
        agentic_cache_path=None,
        agentic_cache_mode="read_write",
        agentic_cache_tools="search",
    )
    executor = build_executor_from_args(args)
    yield executor
    executor.close()


def test_configured_tool_tag_is_a_stop_string_and_is_called(calc_executor, tiny_tokenizer):
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    texts = ["<think> add </think>\n<calc> 40 + 2 </calc> and more text", " <answer> \\boxed{42} </answer>"]
    engine = TextEngine(tiny_tokenizer, texts, eos)
    config = default_rollout_config(group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=256)
    prompt = tiny_tokenizer.encode(
        "<|im_start|>user\nAdd.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    traj = AgenticRollout(engine, calc_executor, tiny_tokenizer, config).rollout([prompt], training=False).groups[0][0]

    assert "</calc>" in engine.stop_strings_seen and "</python>" in engine.stop_strings_seen
    assert "</search>" not in engine.stop_strings_seen  # not a configured tool
    assert [(c.tool, c.content, c.status) for c in traj.tool_calls] == [("calc", "40 + 2", "ok")]
    call = traj.tool_calls[0]
    obs = traj.response_ids[call.pos : call.pos + call.obs_tokens]
    assert tiny_tokenizer.decode(obs) == " <result>\n42\n</result>"
    assert traj.loss_mask[call.pos : call.pos + call.obs_tokens] == [0] * call.obs_tokens
    assert all(traj.loss_mask[: call.pos]) and traj.finish_reason == "eos"


def test_eval_protocol_keeps_its_answer_stop_and_takes_the_tools_from_the_executor(calc_executor, tiny_tokenizer):
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = default_rollout_config(eos_token_id=eos, stop_strings=("</search>", "</python>", "</answer>", "<result>"))
    rollout = AgenticRollout(TextEngine(tiny_tokenizer, [], eos), calc_executor, tiny_tokenizer, config)
    assert rollout.stop_strings == ("</python>", "</calc>", "</answer>", "<result>")


def _qwen_native(tokenizer_dir):
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    from llamafactory_agentic.rollout.tool_format import build_tool_format

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template="qwen"))
    return tokenizer, build_tool_format("template", None, template, tokenizer)


def test_native_qwen_tool_call_is_run_and_its_tool_message_masked(calc_executor, tiny_model_dir):
    tokenizer, fmt = _qwen_native(tiny_model_dir)
    eos = tokenizer.eos_token_id
    call = '<tool_call>\n{"name": "calc", "arguments": {"expression": "6 * 7"}}\n</tool_call>'
    engine = TextEngine(tokenizer, ["<think> multiply </think>\n" + call, "The answer is 42."], eos)
    config = default_rollout_config(group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=256)
    prompt = tokenizer.encode(
        "<|im_start|>user\nMultiply.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )
    rollout = AgenticRollout(engine, calc_executor, tokenizer, config, tool_format=fmt)
    traj = rollout.rollout([prompt], training=False).groups[0][0]

    assert engine.stop_strings_seen == ()  # a native call ends the turn with the end-of-turn token
    assert [(c.tool, c.content, c.status) for c in traj.tool_calls] == [("calc", "6 * 7", "ok")]
    rec = traj.tool_calls[0]
    assert traj.response_ids[rec.pos - 1] == eos and traj.loss_mask[rec.pos - 1] == 1  # the model ended its turn
    obs = traj.response_ids[rec.pos : rec.pos + rec.obs_tokens]
    expected = "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(obs) == expected
    assert traj.loss_mask[rec.pos : rec.pos + rec.obs_tokens] == [0] * rec.obs_tokens
    assert traj.finish_reason == "eos" and tokenizer.decode(traj.response_ids).endswith("The answer is 42.<|im_end|>")

    # the reward's model view goes on past the end of the call's turn (before: it stopped at that EOS)
    from llamafactory_agentic.rewards.model_view import build_model_view

    view = build_model_view(tokenizer, traj.response_ids, traj.loss_mask, eos)
    assert view.endswith("</tool_call><result></result>The answer is 42."), view


def test_native_observation_cannot_inject_special_tokens(tiny_model_dir):
    tokenizer, fmt = _qwen_native(tiny_model_dir)
    ids = fmt.observation_ids(tokenizer, "page <|im_end|> text")
    specials = [t for t in ids if t in set(tokenizer.all_special_ids)]
    im_start, im_end = (tokenizer.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>"))
    assert specials == [im_start, im_end, im_start]  # the template's own tokens only


def test_native_format_needs_a_template_with_json_calls():
    from types import SimpleNamespace

    from llamafactory.data.formatter import StringFormatter

    from llamafactory_agentic.rollout.tool_format import build_tool_format

    template = SimpleNamespace(format_function=StringFormatter(slots=["{{content}}"]))
    with pytest.raises(ValueError, match="agentic_tool_protocol: template needs a template with JSON tool calls"):
        build_tool_format("template", None, template, SimpleNamespace())
    with pytest.raises(ValueError, match="agentic_tool_protocol must be one of inline_tags, template"):
        build_tool_format("hermes")


# ------------------------------------------------------------------ several native calls in one turn (issue 37 item 2)
def _tool_calls(*calls):
    import json

    return "\n".join(
        "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
        for name, arguments in calls
    )


def test_native_turn_with_several_calls_runs_all_concurrently_in_one_tool_message(calc_executor, tiny_model_dir):
    import time

    tokenizer, fmt = _qwen_native(tiny_model_dir)
    eos = tokenizer.eos_token_id
    sleep = "import time\ntime.sleep(1.0)\nprint({!r})"
    turn = _tool_calls(
        ("calc", {"expression": "6 * 7"}),
        ("python", {"code": sleep.format("slept")}),
        ("python", {"code": sleep.format("again")}),
    )
    engine = TextEngine(tokenizer, ["<think> three at once </think>\n" + turn, "The answer is 42."], eos)
    config = default_rollout_config(group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=512)
    prompt = tokenizer.encode("<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    rollout = AgenticRollout(engine, calc_executor, tokenizer, config, tool_format=fmt)
    t0 = time.perf_counter()
    traj = rollout.rollout([prompt], training=False).groups[0][0]
    wall = time.perf_counter() - t0

    # before: only the first call ran (`[("calc", "6 * 7", "ok")]`) and the python calls were dropped
    assert [(c.tool, c.status) for c in traj.tool_calls] == [("calc", "ok"), ("python", "ok"), ("python", "ok")]
    assert traj.num_tool_calls == 3
    first = traj.tool_calls[0]
    assert {c.pos for c in traj.tool_calls} == {first.pos}  # one turn, one tool message after it
    assert [c.obs_tokens for c in traj.tool_calls[1:]] == [0, 0]
    obs = traj.response_ids[first.pos : first.pos + first.obs_tokens]
    expected = (
        "\n<|im_start|>user\n<tool_response>\n42\n</tool_response>\n<tool_response>\nslept\n</tool_response>\n"
        "<tool_response>\nagain\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer.decode(obs) == expected
    assert traj.loss_mask[first.pos : first.pos + first.obs_tokens] == [0] * first.obs_tokens
    assert traj.finish_reason == "eos"
    # the two one-second python calls overlapped: the whole rollout took less than their summed latencies
    python_latency = sum(c.latency_s for c in traj.tool_calls if c.tool == "python")
    assert wall < python_latency, (wall, python_latency)


@pytest.mark.parametrize("schedule", ["rounds", "continuous"])
def test_native_calls_of_one_turn_to_a_stateful_environment_run_in_order(tiny_model_dir, schedule):
    from llamafactory_agentic.tools import ToolExecutor
    from llamafactory_agentic.tools.python_session import PythonSessionTool

    tokenizer, fmt = _qwen_native(tiny_model_dir)
    eos = tokenizer.eos_token_id
    turn = _tool_calls(
        ("python_session", {"code": "import time\ntime.sleep(0.5)\nx = 6"}),
        ("python_session", {"code": "x = x * 7"}),
        ("python_session", {"code": "print(x)"}),
    )
    engine = TextEngine(tokenizer, [turn, "Done."], eos)
    config = default_rollout_config(
        group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=512, schedule=schedule
    )
    prompt = tokenizer.encode("<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    tool = PythonSessionTool(timeout_s=20)
    executor = ToolExecutor([tool], workers=4)
    try:
        traj = AgenticRollout(engine, executor, tokenizer, config, tool_format=fmt).rollout([prompt]).groups[0][0]
        assert [c.status for c in traj.tool_calls] == ["empty", "empty", "ok"]  # no output, no output, 42
        first = traj.tool_calls[0]
        obs = tokenizer.decode(traj.response_ids[first.pos : first.pos + first.obs_tokens])
        # each call saw the state of the calls before it (run concurrently, `print(x)` would have raised NameError)
        assert obs.endswith(
            "</tool_response>\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        )
        assert "Error" not in obs, obs
        assert tool.live_sessions() == []
    finally:
        executor.close()


class LedgerTool:
    """A stateful tool without a lock of its own: each call appends its body to its trajectory's ledger and answers the
    ledger so far; a body starting with `slow` waits 0.4 s first. Run concurrently, a later call would overtake it."""

    stateful = True
    name = tag = "ledger"
    timeout_s = 10.0

    def __init__(self):
        from llamafactory_agentic.tools import BaseTool

        self._base = type("Ledger", (BaseTool,), {"name": "ledger", "default_tag": "ledger", "run": self._run})()
        self.ledgers = {}

    def __getattr__(self, item):  # everything else is BaseTool's (parse, limits, execute_args, ...)
        return getattr(self._base, item)

    def bind(self, trajectory_id, args):
        return (trajectory_id, args)

    def cache_key(self, args):
        return repr(args)

    def _run(self, args):
        import time

        from llamafactory_agentic.tools import ToolOutput

        trajectory_id, body = args
        if body.startswith("slow"):
            time.sleep(0.4)
        ledger = self.ledgers.setdefault(trajectory_id, [])
        ledger.append(body)
        return ToolOutput(",".join(ledger))

    def release(self, trajectory_ids=None):
        pass

    def fork_trajectory(self, parent_id, child_id):
        pass

    def pop_environment_metrics(self):
        return {}

    def close(self):
        pass


def test_native_calls_to_a_stateful_tool_wait_for_each_other_but_not_for_other_tools(tiny_model_dir, calc_executor):
    from llamafactory_agentic.tools import ToolExecutor

    tokenizer, fmt = _qwen_native(tiny_model_dir)
    eos = tokenizer.eos_token_id
    turn = _tool_calls(
        ("ledger", {"entry": "slow a"}), ("ledger", {"entry": "b"}), ("calc", {"expression": "1 + 1"}),
        ("ledger", {"entry": "c"}),
    )  # fmt: skip
    engine = TextEngine(tokenizer, [turn, "Done."], eos)
    config = default_rollout_config(
        group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=512, max_tool_calls=8
    )
    prompt = tokenizer.encode("<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    ledger = LedgerTool()
    executor = ToolExecutor({"ledger": ledger, "calc": calc_executor.tools["calc"]}, workers=4)
    try:
        traj = AgenticRollout(engine, executor, tokenizer, config, tool_format=fmt).rollout([prompt]).groups[0][0]
    finally:
        executor.close()
    assert list(ledger.ledgers.values()) == [["slow a", "b", "c"]]  # call order, although `b` was quicker
    first = traj.tool_calls[0]
    obs = tokenizer.decode(traj.response_ids[first.pos : first.pos + first.obs_tokens])
    blocks = obs.split("<tool_response>\n")[1:]
    assert [b.split("\n</tool_response>")[0] for b in blocks] == ["slow a", "slow a,b", "2", "slow a,b,c"]


def test_native_calls_past_the_call_limit_get_a_notice(calc_executor, tiny_model_dir):
    tokenizer, fmt = _qwen_native(tiny_model_dir)
    eos = tokenizer.eos_token_id
    turn = _tool_calls(*[("calc", {"expression": f"{i} + 1"}) for i in range(3)])
    engine = TextEngine(tokenizer, [turn, "Done."], eos)
    config = default_rollout_config(
        group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=512, max_tool_calls=2
    )
    prompt = tokenizer.encode("<|im_start|>user\nGo.<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    traj = AgenticRollout(engine, calc_executor, tokenizer, config, tool_format=fmt).rollout([prompt]).groups[0][0]
    assert [c.status for c in traj.tool_calls] == ["ok", "ok", "limit"] and traj.num_tool_calls == 2
    first = traj.tool_calls[0]
    obs = tokenizer.decode(traj.response_ids[first.pos : first.pos + first.obs_tokens])
    assert "\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>\n<tool_response>\nAt most 2 tool calls" in obs
