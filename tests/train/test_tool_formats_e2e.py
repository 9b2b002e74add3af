# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Two ARPO steps through the real `llamafactory-cli train recipes/tiny/arpo_cpu.yaml` with (1) a third tool from the
tool config, `calc_tool:CalcTool` with tag `<calc>` (issue 28 item 1), (2) the `add` tool of a real MCP server
(`tests/tools/mcp_test_server.py` over stdio, an `mcp_servers` entry of the tool config, called as `<add>{json}</add>`)
and (3) the native JSON tool calls of the `qwen` and the `qwen3` templates (thinking off), `agentic_tool_protocol:
template` (issue 28 item 3).

As in test_arpo_e2e.py, the tiny random model is first fitted for a few seconds to answer every prompt with one call
(so the rollout really calls the tool; the rows are short `arpo_rl` rows written here, so that it is fitted on the
whole prompt); the run itself is real: the recipe, the real executor and tool, the hf engine, the trainer,
`rollouts.jsonl`. Before this change the `<calc>` run never stopped on `</calc>` (the rollout's stop
strings were fixed to `</search>`, `</python>`), so no calc call was made, and a native run had no call at all
(the `<|im_end|>` after `</tool_call>` ended the trajectory).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ANSWER = " <answer> The final answer is \\[ \\boxed{42} \\] </answer>"
CALC_SCRIPT = [
    ("<think> Let me compute. </think>\n<calc> 40 + 2 </calc>", True),
    (" <result>\n42\n</result>", False),
    (ANSWER, True),
]
NATIVE_CALL = '<think> Let me compute. </think>\n<tool_call>\n{"name": "calc", "arguments": {"expression": "40 + 2"}}\n</tool_call>'
NATIVE_OBSERVATION = "\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
NATIVE_SCRIPT = [(NATIVE_CALL, True), ("<EOS>", True), (NATIVE_OBSERVATION, False), (ANSWER, True)]
MCP_SCRIPT = [
    ('<think> Let me compute. </think>\n<add>{"a": 40, "b": 2}</add>', True),
    (" <result>\n42\n</result>", False),
    (ANSWER, True),
]
# qwen3 (a reasoning template): with `enable_thinking: true` (LLaMA-Factory's default) the model writes its own thought
# before the call; with `false` every prompt part that ends with the assistant header ends with the empty thought
# (LLaMA-Factory's `ReasoningTemplate`, masked), so the RL prompt and the tool message end with it and the function
# turn carries no thought (LLaMA-Factory removes the thoughts of earlier turns when thinking is off)
EMPTY_THOUGHT = "<think>\n\n</think>\n\n"
QWEN3_CALL = '<tool_call>\n{"name": "calc", "arguments": {"expression": "40 + 2"}}\n</tool_call>'
QWEN3_CASES = {  # enable_thinking: (script, text after the assistant header of the prompt, the masked tool message)
    True: (NATIVE_SCRIPT, "", NATIVE_OBSERVATION),
    False: (
        [(QWEN3_CALL, True), ("<EOS>", True), (NATIVE_OBSERVATION + EMPTY_THOUGHT, False), (ANSWER, True)],
        EMPTY_THOUGHT,
        NATIVE_OBSERVATION + EMPTY_THOUGHT,
    ),
}
MCP_SERVER = REPO / "tests" / "tools" / "mcp_test_server.py"


SYSTEM = "Use <calc> </calc> to compute. Answer in \\boxed{}."
QUESTIONS = ["What is 40 + 2?", "Compute 40 + 2.", "Add 40 and 2.", "What is the sum of 40 and 2?"]


def _row(i: int, split: str) -> dict:
    question = QUESTIONS[i % len(QUESTIONS)] + " " * (i // len(QUESTIONS))
    return {
        "data_source": "calc_unit",
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        "ability": "math",
        "reward_model": {"ground_truth": "42", "style": "rule"},
        "extra_info": {"index": i, "split": split},
    }


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_model_dir):
    import pyarrow as pa
    import pyarrow.parquet as pq

    # short prompts of the ARPO RL format (`arpo_rl`): the policy is fitted on the whole prompt, so it writes its call
    root = tmp_path_factory.mktemp("tool-formats-e2e")
    datasets = root / "datasets"
    datasets.mkdir()
    rows = {"train": [_row(i, "train") for i in range(8)], "valid": [_row(i, "test") for i in range(2)]}
    info = {}
    for split, split_rows in rows.items():
        pq.write_table(pa.Table.from_pylist(split_rows), datasets / f"calc_{split}.parquet")
        info[f"calc_{split}"] = {"file_name": f"calc_{split}.parquet", "formatting": "arpo_rl"}
    (datasets / "dataset_info.json").write_text(json.dumps(info))
    tools = root / "tools.yaml"
    tools.write_text("tools:\n  - name: python\n  - name: calc_tool:CalcTool\n    tag: calc\n    timeout: 5\n")
    # the MCP test server's `add` tool (stdio: the executor starts the server process), next to a built-in tool
    mcp_tools = root / "mcp_tools.yaml"
    mcp_tools.write_text(
        "tools:\n  - name: python\nmcp_servers:\n  - name: calc\n"
        f"    command: {json.dumps(sys.executable)}\n    args: [{json.dumps(str(MCP_SERVER))}, stdio]\n"
        "    tools: [add]\n    timeout: 20\n"
    )
    return {
        "root": root,
        "datasets": datasets,
        "rows": rows["train"],
        "tools": tools,
        "mcp_tools": mcp_tools,
        "model": tiny_model_dir,
    }


@pytest.fixture(scope="module")
def qwen3_model_dir(tmp_path_factory):
    r"""The tiny model with the token layout of the Qwen3 tokenizers (`<think>`, `<tool_call>`, `<tool_response>`, ...
    ordinary added tokens, `llamafactory_agentic.testing.CHAT_FORMATS["qwen3"]`), its embeddings grown to match."""
    from transformers import AutoModelForCausalLM

    from llamafactory_agentic.testing import build_tiny_model, build_tiny_tokenizer

    path = build_tiny_model(tmp_path_factory.mktemp("tiny-qwen3"))
    tokenizer = build_tiny_tokenizer(path, "qwen3")
    model = AutoModelForCausalLM.from_pretrained(str(path))
    model.resize_token_embeddings(len(tokenizer))
    model.save_pretrained(str(path))
    return path


def _train(env, name, script, *extra_args, tools=None, model=None, prompt_suffix=""):
    from ._helpers import fit_tool_policy

    out = env["root"] / name
    policy = env["root"] / f"{name}-policy"
    fit_tool_policy(
        model or env["model"], policy, env["rows"], steps=200, context=512, script=script, prompt_suffix=prompt_suffix
    )
    cmd = [
        str(BIN / "llamafactory-cli"),
        "train",
        str(REPO / "recipes/tiny/arpo_cpu.yaml"),
        f"model_name_or_path={policy}",
        f"dataset_dir={env['datasets']}",
        f"output_dir={out}",
        f"agentic_tool_config={tools or env['tools']}",
        f"agentic_cache_path={out / 'tool_cache.sqlite'}",
        "dataset=calc_train",
        "eval_dataset=calc_valid",
        *extra_args,
    ]
    # the user's tool module lives outside the plugin: on the path, as a user's own package would be
    pythonpath = os.pathsep.join(p for p in (str(REPO / "tests" / "train"), os.environ.get("PYTHONPATH")) if p)
    env_vars = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=pythonpath)
    env_vars.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    proc = subprocess.run(cmd, cwd=REPO, env=env_vars, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-5000:]}\n{proc.stderr[-8000:]}"
    records = [json.loads(line) for line in (out / "trainer_log.jsonl").read_text().splitlines()]
    assert [r["current_steps"] for r in records if "loss" in r] == [1, 2]
    groups = [json.loads(line) for line in (out / "rollouts.jsonl").read_text().splitlines()]
    return records, [t for g in groups for t in g["trajectories"]]


def _calc_calls(trajectories, tool="calc"):
    calls = []
    for traj in trajectories:
        spans = traj["observation_spans"]
        for call in traj["tool_calls"]:
            if call["tool"] != tool or call["status"] != "ok":
                continue
            # the observation starts where the call ended and is masked: one whole observation span
            end = min(call["pos"] + call["obs_tokens"], len(traj["response_ids"]))  # R may cut the observation
            assert [call["pos"], end] in [list(s) for s in spans], (call, spans)
            calls.append((traj, call))
    return calls


def test_third_tool_from_the_tool_config_is_called_in_two_arpo_steps(env):
    records, trajectories = _train(env, "calc-tags", CALC_SCRIPT)
    calls = _calc_calls(trajectories)
    assert calls, [t["response"][:200] for t in trajectories]
    traj, call = calls[0]
    assert call["content"] == "40 + 2"
    assert "<calc> 40 + 2 </calc> <result>\n42\n</result>" in traj["response"]
    assert sum(r.get("tools/calc/calls", 0) for r in records) > 0  # the executor's per-tool metrics name it


def test_native_qwen_tool_calls_train_two_arpo_steps(env):
    records, trajectories = _train(
        env, "calc-native", NATIVE_SCRIPT, "agentic_tool_protocol=template", "arpo_max_response_length=160"
    )
    calls = _calc_calls(trajectories)
    assert calls, [t["response"][:300] for t in trajectories]
    traj, call = calls[0]
    assert call["content"] == "40 + 2"
    assert "</tool_call><|im_end|>" + NATIVE_OBSERVATION.replace("42", "42", 1) in traj["response"]
    assert "<result>" not in traj["response"]


def test_mcp_server_tool_is_called_in_two_arpo_steps(env):
    records, trajectories = _train(env, "mcp-add", MCP_SCRIPT, tools=env["mcp_tools"])
    calls = _calc_calls(trajectories, tool="add")
    assert calls, [t["response"][:200] for t in trajectories]
    traj, call = calls[0]
    assert json.loads(call["content"]) == {"a": 40, "b": 2}
    # the rollout stopped on `</add>` (the MCP tool's tag) and the observation is the server's answer, 40 + 2
    assert '<add>{"a": 40, "b": 2}</add> <result>\n42\n</result>' in traj["response"]
    assert sum(r.get("tools/add/calls", 0) for r in records) > 0


@pytest.mark.parametrize("enable_thinking", [True, False], ids=["thinking", "no-thinking"])
def test_native_qwen3_tool_calls_train_two_arpo_steps(env, qwen3_model_dir, enable_thinking):
    from transformers import AutoTokenizer

    script, prompt_suffix, tool_message = QWEN3_CASES[enable_thinking]
    name = f"calc-native-qwen3-{enable_thinking}"
    records, trajectories = _train(
        env,
        name,
        script,
        "template=qwen3",
        f"enable_thinking={str(enable_thinking).lower()}",
        "agentic_tool_protocol=template",
        "arpo_max_response_length=160",
        model=qwen3_model_dir,
        prompt_suffix=prompt_suffix,
    )
    groups = [json.loads(line) for line in (env["root"] / name / "rollouts.jsonl").read_text().splitlines()]
    assert groups[0]["prompt"].endswith("<|im_start|>assistant\n" + prompt_suffix), groups[0]["prompt"][-80:]
    calls = _calc_calls(trajectories)
    assert calls, [t["response"][:300] for t in trajectories]
    traj, call = calls[0]
    assert call["content"] == "40 + 2"
    assert QWEN3_CALL + "<|im_end|>" + tool_message in traj["response"]
    assert "<result>" not in traj["response"]
    # the masked observation span is exactly the qwen3 tool message (and, thinking off, the next turn's empty thought)
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3_model_dir))
    start = call["pos"]
    assert tokenizer.decode(traj["response_ids"][start : start + call["obs_tokens"]]) == tool_message
    assert sum(r.get("tools/calc/calls", 0) for r in records) > 0
    if enable_thinking:  # the policy's own thought passes the reference format gate: the call leads to reward 1
        assert any(t["accuracy"] == 1.0 and t["reward"] == 1.0 for t, _ in calls), [t["reward"] for t, _ in calls]
    # with thinking off the policy writes no `<think>` block, so the default ARPO reward's format gate (rule 1 of
    # rewards.deep_research.validate_format) scores every trajectory -1 (docs/algorithms.md §2.7)
