# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Chat with tools (issue 28 item 4): LLaMA-Board's chat engine answers through the training agent loop and executor.

The checkpoint is fitted by `webui._helpers.fit_chat_policy` to write `<python>print(43+64)</python>` (scripted);
it never saw 107. LLaMA-Factory's own chat stream writes the call and no result; `agentic_answer` runs it in the
python sandbox of training and inserts the observation.
"""

import pytest

from llamafactory_agentic.webui.chat import ChatTools, agentic_answer, stop_strings, tool_config_choices
from llamafactory_agentic.webui.rollouts import render_chat_turn
from webui._helpers import CALL, QUESTION, fit_chat_policy


@pytest.fixture(scope="module")
def chat_model(tiny_model_dir, tmp_path_factory):
    from llamafactory.chat import ChatModel

    policy = fit_chat_policy(tiny_model_dir, tmp_path_factory.mktemp("chat") / "policy")
    return ChatModel(
        dict(model_name_or_path=str(policy), template="qwen", infer_backend="huggingface", trust_remote_code=True)
    )


def test_stock_chat_writes_the_call_and_no_result(chat_model):
    # the observation: LLaMA-Board's chat shows the call; nothing runs it
    text = "".join(chat_model.stream_chat([{"role": "user", "content": QUESTION}], max_new_tokens=40))
    assert CALL in text and "107" not in text


def test_agentic_answer_runs_the_call_in_the_training_executor(chat_model):
    messages = [{"role": "user", "content": QUESTION}]
    record = agentic_answer(chat_model.engine, messages, "", ChatTools(), 64, 0.95, 0.7)
    assert record["response"].startswith(CALL + " <result>\n107\n</result>"), record["response"]
    (call,) = record["tool_calls"]
    assert (call["tool"], call["content"], call["status"], call["cached"]) == ("python", "print(43+64)", "ok", False)
    assert record["finish_reason"] == "eos" and record["num_tool_calls"] == 1
    assert record["history"].startswith(CALL + " <result>\n107\n</result>") and "<|im_end|>" not in record["history"]
    page = render_chat_turn(record)
    assert '<span class="ag-result">&lt;result&gt;\n107\n&lt;/result&gt;' in page, page
    assert "call 1: python · ok" in page and "1 call" in page and "finish eos" in page
    # the call limit of the panel is the loop's: 0 calls allowed ends the answer at the first call
    limited = agentic_answer(chat_model.engine, messages, "", ChatTools(max_tool_calls=0), 64, 0.95, 0.7)
    assert limited["hit_call_limit"] and "107" not in limited["response"]


def test_tool_settings_errors_and_tags(chat_model, tmp_path):
    messages = [{"role": "user", "content": QUESTION}]
    with pytest.raises(FileNotFoundError, match="no_tools.yaml"):
        agentic_answer(
            chat_model.engine, messages, "", ChatTools(tool_config=str(tmp_path / "no_tools.yaml")), 8, 1, 1
        )

    class VllmLike:  # LLaMA-Factory's vLLM/SGLang engines keep the model in their own server
        tokenizer = template = object()

    with pytest.raises(ValueError, match="needs the huggingface inference backend"):
        agentic_answer(VllmLike(), messages, "", ChatTools(), 8, 1.0, 1.0)
    # the stop strings are the configured tools' closing tags
    from llamafactory_agentic.webui.chat import build_chat_executor

    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: python\n    tag: code\n")
    executor = build_chat_executor(ChatTools(tool_config=str(config)))
    try:
        assert stop_strings(executor) == ("</code>",)
    finally:
        executor.close()
    labels = [value for _, value in tool_config_choices()]
    assert labels[0] == "" and any(value.endswith("offline_local.yaml") for value in labels)
