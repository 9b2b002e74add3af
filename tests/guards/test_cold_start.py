# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The cold-start check before RL (issue 35: RL straight from a model that never learned the tags has no signal)."""

import json

from llamafactory_agentic.guards.cold_start import (
    COLD_START_MARKER,
    cold_start_evidence,
    cold_start_warning,
    write_cold_start_marker,
)


def test_marker_of_agentic_sft_or_an_rl_run_counts_as_a_cold_start(tmp_path):
    sft = tmp_path / "sft"
    (sft / "checkpoint-500").mkdir(parents=True)
    assert cold_start_evidence(str(sft)) is None
    message = cold_start_warning(str(sft))
    assert message.startswith(f"{sft} shows no sign of a cold start on the tool tags")
    assert "stage: agentic_sft" in message and "ignore this" in message

    path = write_cold_start_marker(str(sft), {"stage": "agentic_sft", "template": "qwen"})
    assert json.loads(open(path).read())["stage"] == "agentic_sft" and path.endswith(COLD_START_MARKER)
    assert cold_start_warning(str(sft)) is None
    assert cold_start_evidence(str(sft / "checkpoint-500")) == path  # a checkpoint inside the SFT run's folder

    rl = tmp_path / "arpo"
    rl.mkdir()
    (rl / "agentic_config.json").write_text("{}")
    assert cold_start_warning(str(rl)) is None  # continuing from an RL run
    adapter = tmp_path / "lora"
    adapter.mkdir()
    (adapter / COLD_START_MARKER).write_text("{}")
    assert cold_start_warning("Qwen/Qwen2.5-7B-Instruct", f"{tmp_path / 'other'},{adapter}") is None
    assert "Qwen/Qwen2.5-7B-Instruct shows no sign" in cold_start_warning("Qwen/Qwen2.5-7B-Instruct")
