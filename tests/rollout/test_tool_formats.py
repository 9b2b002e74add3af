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
