# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The Chat tab's tool settings as the checkpoint was trained (issue 35 deliver 4): `agentic_config.json` -> fields.

The demo's ARPO model was trained with `agentic_search_topk: 3` (the tiny checkpoints here record 1) and the Chat used
its own default of 10; the training system prompt had to be typed by hand. Files are written here as training writes
them (`train.presets.save_agentic_config`, `record_system_prompt`).
"""

from types import SimpleNamespace

import pytest

from llamafactory_agentic.train.presets import record_system_prompt, save_agentic_config, training_system_prompt
from llamafactory_agentic.webui.chat import (
    ChatTools,
    build_chat_executor,
    checkpoint_chat_settings,
    checkpoint_folders,
)


def _trained(folder, **keys):
    result = {"stage": "arpo", "preset": "arpo", "values": {"agentic_max_tool_calls": 2}, "explicit": [],
              "from_preset": [], "derived": []}  # fmt: skip
    args = SimpleNamespace(agentic_search_topk=1, agentic_search_backend="replay", agentic_tool_config=None,
                           agentic_python_timeout=7.0, agentic_search_index="idx", **keys)  # fmt: skip
    return save_agentic_config(result, str(folder), args)


def test_checkpoint_settings_fill_the_chat_fields(tmp_path):
    run = tmp_path / "saves" / "Custom" / "full" / "arpo_run"
    path = _trained(run)
    assert record_system_prompt(str(run), "Use <search> to look things up.") == path
    (run / "checkpoint-4").mkdir()
    for folder in (run, run / "checkpoint-4"):  # a checkpoint-N folder reads the run's file above it
        settings, source = checkpoint_chat_settings([str(folder)])
        assert source == path
        assert settings == {
            "tool_config": "",  # trained with the built-in tools (recorded None): not a config of a model loaded before
            "search_backend": "replay",
            "search_index": "idx",
            "search_topk": 1,  # not the Chat's default of 10
            "max_tool_calls": 2,
            "python_timeout": 7.0,
            "system_prompt": "Use <search> to look things up.",
        }, settings
    assert ChatTools().search_topk == 10
    # a model without one: nothing to fill, the fields keep their values
    assert checkpoint_chat_settings([str(tmp_path)]) == ({}, "")
    # LLaMA-Board's top row: a full checkpoint name is a folder under the save dir, adapters likewise, then the model
    save = lambda name: run.parent / name  # noqa: E731
    assert checkpoint_folders("/m", "full", "arpo_run", save) == [str(run), "/m"]
    assert checkpoint_folders("/m", "lora", ["a", "b"], save) == [str(run.parent / "a"), str(run.parent / "b"), "/m"]
    assert checkpoint_folders("/m", "full", None, save) == ["/m"]


def test_broken_checkpoint_config_is_named(tmp_path):
    (tmp_path / "agentic_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="agentic_config.json is not a valid"):
        checkpoint_chat_settings([str(tmp_path)])


def test_board_updates_from_the_checkpoint(tmp_path, monkeypatch):
    import gradio as gr
    import llamafactory.webui.common as common

    from llamafactory_agentic.webui.board_tabs import CHAT_FIELDS, checkpoint_updates

    monkeypatch.setattr(common, "get_save_dir", lambda *parts: str(tmp_path.joinpath(*parts)))
    run = tmp_path / "Custom" / "full" / "arpo_run"
    _trained(run)
    *values, system, source = checkpoint_updates("en", "Custom", "/nowhere", "full", "arpo_run")
    got = dict(zip(CHAT_FIELDS, values))
    assert got["search_topk"] == 1 and got["search_backend"] == "replay" and got["max_calls"] == 2
    # trained with the built-in tools (agentic_tool_config recorded as None): the field says so, whatever a model loaded
    # before left in it (the browser test loads two checkpoints in a row); the system prompt is not recorded
    assert got["tool_config"] == "" and isinstance(system, type(gr.skip()))
    assert "agentic_config.json" in source and str(run) in source
    # a file of an older version records no tool keys at all: the fields keep their values
    (run / "agentic_config.json").write_text('{"stage": "arpo", "values": {"agentic_max_tool_calls": 2}}')
    *values, _, _ = checkpoint_updates("en", "Custom", "/nowhere", "full", "arpo_run")
    got = dict(zip(CHAT_FIELDS, values))
    assert got["max_calls"] == 2 and isinstance(got["tool_config"], type(gr.skip()))
    assert isinstance(got["search_index"], type(gr.skip()))
    *_, source = checkpoint_updates("zh", "Custom", "/nowhere", "full", None)
    assert "没有 agentic_config.json" in source


def test_training_system_prompt_and_chat_executor_topk(tmp_path):
    assert training_system_prompt(["", "A", "B", "A"], "default") == "A"
    assert training_system_prompt(["", ""], "You are helpful.") == "You are helpful."
    assert training_system_prompt([], None) == ""
    assert record_system_prompt(str(tmp_path), "x") is None and not (tmp_path / "agentic_config.json").exists()
    executor = build_chat_executor(ChatTools(search_backend="replay", search_topk=1, search_index=""))
    try:
        search = executor.tools["search"]
        assert search.topk == 1 and type(search.backend).__name__ == "ReplayBackend"
    finally:
        executor.close()
