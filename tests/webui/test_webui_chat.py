# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Chat with tools (issue 28 item 4): LLaMA-Board's chat engine answers through the training agent loop and executor.

The checkpoint is fitted by `webui._helpers.fit_chat_policy` to write `<python>print(43+64)</python>` (scripted);
it never saw 107. LLaMA-Factory's own chat stream writes the call and no result; `agentic_answer` runs it in the
python sandbox of training and inserts the observation.
"""

import os

import pytest

from llamafactory_agentic.webui.chat import (
    REPO_RECIPES,
    ChatTools,
    agentic_answer,
    build_chat_executor,
    checked_tool_config,
    stop_strings,
    tool_config_choices,
)
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


def test_tool_settings_errors_and_tags(chat_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the working directory's tool configs may be read
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
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - name: python\n    tag: code\n")
    executor = build_chat_executor(ChatTools(tool_config=str(config)))
    try:
        assert stop_strings(executor) == ("</code>",)
    finally:
        executor.close()
    labels = [value for _, value in tool_config_choices()]
    assert labels[0] == "" and any(value.endswith("offline_local.yaml") for value in labels)


SECRET_FILE = "root:$6$saltsalt$hashhashhash:19000:0:99999:7:::\nDB_PASSWORD: hunter2\n"


@pytest.mark.parametrize(
    "typed",
    [
        "/etc/shadow",  # no YAML suffix, outside the working directory: refused before it is read
        "/etc/passwd",
        "../outside/secrets.yaml",  # a YAML file above the working directory
        "inside/../../outside/secrets.yaml",
        "link.yaml",  # a link in the working directory to a file outside it
        "notes.txt",  # inside, but not a tool config
    ],
)
def test_chat_tool_config_outside_the_allowed_folders_is_refused_unread(tmp_path, monkeypatch, typed):
    # issue 34 high 4: the dropdown took any typed path and the loader's error showed the file's lines in the page
    outside, board = tmp_path / "outside", tmp_path / "board"
    outside.mkdir()
    board.mkdir()
    (outside / "secrets.yaml").write_text(SECRET_FILE)
    (board / "notes.txt").write_text(SECRET_FILE)
    (board / "link.yaml").symlink_to(outside / "secrets.yaml")
    monkeypatch.chdir(board)
    opened = []
    real_open = open

    def spy(file, *args, **kwargs):
        opened.append(os.path.realpath(str(file)))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", spy)
    with pytest.raises(ValueError, match="reads only tool configs") as info:
        build_chat_executor(ChatTools(tool_config=typed))
    text = str(info.value)
    assert "hunter2" not in text and "saltsalt" not in text and str(board) in text
    assert not any(path.endswith(("secrets.yaml", "notes.txt", "shadow", "passwd")) for path in opened), opened


def test_chat_tool_config_roots(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.yml").write_text("tools: [python]\n")
    assert checked_tool_config("mine.yml") == str(tmp_path / "mine.yml")
    assert checked_tool_config("") == ""
    shipped = REPO_RECIPES / "offline_local.yaml"
    assert checked_tool_config(str(shipped)) == str(shipped.resolve())
    # every listed choice is accepted
    for _, value in tool_config_choices():
        assert checked_tool_config(value) == (str(os.path.realpath(value)) if value else "")
    # started from the file system's root, only recipes/ folders count, not every file of the host
    with pytest.raises(ValueError, match="reads only tool configs"):
        checked_tool_config("/etc/some.yaml", cwd="/")


def test_chat_tool_config_inside_the_folder_never_echoes_its_content(tmp_path, monkeypatch):
    # a YAML file the picker accepts (the working directory's) still never comes back in the message
    monkeypatch.chdir(tmp_path)
    for name, text, expected in (
        ("shadow.yaml", SECRET_FILE.replace("DB_PASSWORD: hunter2\n", ""), "1 unknown top-level key (not named"),
        ("env.yaml", "DB_PASSWORD: hunter2\nAPI_TOKEN: ghp_abcdef\n", "2 unknown top-level keys (not named"),
        ("broken.yaml", "tools: [python]\nDB_PASSWORD: hunter2: extra\n", "not valid YAML at line 2, column 21"),
    ):
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError, match=r"tool config|tools|YAML") as info:
            build_chat_executor(ChatTools(tool_config=name))
        message = str(info.value)
        assert expected in message, message
        for secret in ("hunter2", "DB_PASSWORD", "ghp_abcdef", "saltsalt", "root:"):
            assert secret not in message, message
