# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The tool configs shipped in recipes/tools load and build a working executor (no network is used to build)."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from llamafactory_agentic.tools import build_executor_from_args
from llamafactory_agentic.tools.index import build_corpus_from_cache_json
from llamafactory_agentic.tools.registry import load_tool_config


REPO = Path(__file__).resolve().parents[2]
CONFIGS = sorted((REPO / "recipes" / "tools").glob("*.yaml"))


def test_every_shipped_config_is_listed():
    assert {p.stem for p in CONFIGS} >= {"web_brightdata", "web_serper", "offline_local", "retriever"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_shipped_tool_config_builds_an_executor(path, tmp_path, monkeypatch, synthetic_data):
    monkeypatch.setenv("BRIGHTDATA_API_KEY", "secret-bd-key")
    monkeypatch.setenv("SERPER_API_KEY", "secret-serper-key")
    monkeypatch.chdir(tmp_path)  # relative paths in the configs (saves/...) resolve under the test folder
    # the index only has to exist (the check runs python): the synthetic cache in the release's layout
    build_corpus_from_cache_json(synthetic_data / "arpo" / "search_cache.json", tmp_path / "saves" / "search_index")
    config = load_tool_config(str(path))
    assert [t.name for t in config.tools] == ["python", "search"]

    args = SimpleNamespace(agentic_tool_config=str(path), agentic_cache_path=str(tmp_path / "cache.sqlite"))
    executor = build_executor_from_args(args)
    try:
        from llamafactory_agentic.tools import ToolCall

        (result,) = executor.execute([ToolCall("python", "print(6 * 7)")])
        assert result.status == "ok" and result.text == "42"
        assert "secret" not in repr(executor.tools if hasattr(executor, "tools") else executor)
    finally:
        executor.close()
