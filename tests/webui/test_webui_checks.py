# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Checks before Start on real files: dataset_info.json, ARPO parquet rows, SFT trajectories, tool configs."""

import json
import shutil
from pathlib import Path

import pytest

from llamafactory_agentic.webui.checks import dataset_fit, format_findings, run_checks
from llamafactory_agentic.webui.panel import rank_datasets


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def data_dir(tmp_path, shared_data):
    """A dataset folder: 6 real ARPO RL rows (row 3's ground truth emptied), the demo SFT file with row 1's tags broken."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = pq.read_table(shared_data / "arpo" / "rl" / "train_10k.parquet").slice(0, 6).to_pylist()
    rows[3]["reward_model"] = {**rows[3]["reward_model"], "ground_truth": ""}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "rl.parquet")
    pq.write_table(pa.Table.from_pylist(rows[:3]), tmp_path / "rl_ok.parquet")
    sft = [json.loads(line) for line in (REPO / "data" / "arpo_sft_demo.jsonl").read_text().splitlines()]
    sft[1]["conversations"][1]["value"] = sft[1]["conversations"][1]["value"].replace("</think>", "", 1)
    (tmp_path / "sft.jsonl").write_text("".join(json.dumps(row) + "\n" for row in sft))
    info = json.loads((REPO / "data" / "dataset_info.json").read_text())
    sft_columns = info["arpo_sft_demo"]["columns"]
    info = {
        "rl_bad": {"file_name": "rl.parquet", "formatting": "arpo_rl"},
        "rl_ok": {"file_name": "rl_ok.parquet", "formatting": "arpo_rl"},
        "sft_bad": {"file_name": "sft.jsonl", "formatting": "arpo_sft", "columns": sft_columns},
        "alpaca_set": {"file_name": "sft.jsonl"},
        "pairs": {"file_name": "sft.jsonl", "ranking": True, "formatting": "sharegpt"},
    }
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    model = tmp_path / "model"
    model.mkdir()
    (model / "agentic_sft.json").write_text("{}")  # the policy: with the marker agentic_sft leaves (cold-started)
    return tmp_path


def arpo_args(data_dir, **overrides):
    args = {
        "stage": "arpo",
        "model_name_or_path": str(data_dir / "model"),
        "finetuning_type": "full",
        "dataset_dir": str(data_dir),
        "dataset": "rl_ok",
        "max_samples": 100000,
        "output_dir": str(data_dir / "out"),
        "per_device_train_batch_size": 4,
        "gradient_accumulation_steps": 1,
        "arpo_rollout_n": 4,
        "arpo_initial_rollouts": 2,
        "arpo_rollout_batch_size": 2,
        "arpo_rollout_log_ratio": 0.5,
        "agentic_search_backend": "replay",
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    args.update(overrides)
    return args


def errors(findings):
    return [f for f in findings if f.level == "error"]


def test_clean_arguments_pass(data_dir):
    # issue 35: a policy with no sign of a cold start on the tags is warned about before Start (RL from it usually
    # has no learning signal); the marker agentic_sft leaves next to its model clears it
    (data_dir / "model" / "agentic_sft.json").unlink()  # the fixture's policy has the marker
    findings = run_checks("arpo", arpo_args(data_dir))
    (warning,) = [f for f in findings if f.level != "info"]
    assert warning.level == "warning" and warning.subject == f"`{data_dir / 'model'}`", warning
    assert warning.message.startswith("shows no sign of a cold start on the tool tags"), warning
    assert warning.fix.startswith("train `stage: agentic_sft` on tool trajectories first"), warning
    (data_dir / "model" / "agentic_sft.json").write_text("{}")
    findings = run_checks("arpo", arpo_args(data_dir))
    assert not [f for f in findings if f.level != "info"], findings
    assert "✔ No problems found." in format_findings(findings)


def test_mistyped_key_gets_the_closest_key(data_dir):
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, arpo_intial_rollouts=2)))
    assert finding.subject == "`arpo_intial_rollouts`" and finding.fix == "did you mean `arpo_initial_rollouts`?"


def test_bad_rl_row_is_named_with_the_fix_and_skipping_turns_it_into_a_warning(data_dir):
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, dataset="rl_bad")))
    assert "rl.parquet row 3: field reward_model.ground_truth is empty" in finding.message
    assert "agentic_skip_bad_rows" in finding.fix
    findings = run_checks("arpo", arpo_args(data_dir, dataset="rl_bad", agentic_skip_bad_rows=True))
    assert not errors(findings)
    assert any(f.level == "warning" and "1 malformed row (3) will be skipped" in f.message for f in findings)
    # LLaMA-Factory's max_samples applies as in the run: the bad row is beyond the first 3
    assert not errors(run_checks("arpo", arpo_args(data_dir, dataset="rl_bad", max_samples=3)))


def test_bad_sft_trajectory_is_named_for_agentic_sft(data_dir):
    args = arpo_args(data_dir, stage="agentic_sft", dataset="sft_bad")
    (finding,) = errors(run_checks("agentic_sft", args))
    assert "sft.jsonl row 1: tag <think>: <think> at character" in finding.message, finding.message


def test_dataset_formatting_must_fit_the_stage(data_dir):
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, dataset="sft_bad")))
    assert "formatting: arpo_sft" in finding.message and "`rl_bad`" in finding.fix
    (finding,) = errors(run_checks("agentic_sft", arpo_args(data_dir, dataset="rl_ok")))
    assert "prompts with a ground truth and no trajectory" in finding.message and "`sft_bad`" in finding.fix
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, dataset="nope")))
    assert "Undefined dataset nope" in finding.message
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, eval_dataset="sft_bad")))  # from Extra arguments
    assert finding.subject == "dataset `sft_bad`"


def test_dataset_list_offers_fitting_formats_first(data_dir):
    info = json.loads((data_dir / "dataset_info.json").read_text())
    assert [dataset_fit("arpo", info[n]) for n in info] == [0, 0, 2, 2, 2]
    assert rank_datasets("arpo", info) == [
        ("rl_bad", "rl_bad"),
        ("rl_ok", "rl_ok"),
        ("sft_bad (arpo_sft: not for arpo)", "sft_bad"),
        ("alpaca_set (alpaca: not for arpo)", "alpaca_set"),
        ("pairs (ranking: not for arpo)", "pairs"),
    ]
    assert [name for _, name in rank_datasets("agentic_sft", info)] == [
        "sft_bad",
        "alpaca_set",
        "rl_bad",
        "rl_ok",
        "pairs",
    ]


def test_output_dir_must_not_be_the_model_or_another_stage_run(data_dir):
    (finding,) = errors(
        run_checks("arpo", arpo_args(data_dir, output_dir=str(data_dir / "model")), suggested_output_dir="arpo_x")
    )
    assert "is the model the run starts from" in finding.message and "`arpo_x`" in finding.fix
    sft_run = data_dir / "sft_run"
    sft_run.mkdir()
    (sft_run / "training_args.yaml").write_text("stage: sft\nagentic_sft_mask_results: true\n")
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, output_dir=str(sft_run))))
    assert "holds a `sft` run" in finding.message and "Checkpoint path `sft_run`" in finding.fix


def test_tool_config_that_does_not_load(data_dir):
    bad = data_dir / "tools.yaml"
    bad.write_text("tools:\n  - name: python\n    timout: 3\n")
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, agentic_tool_config=str(bad))))
    assert "does not load" in finding.message and "unknown keys ['timout']" in finding.message
    bad.write_text("tools:\n  - name: calculator\n")
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, agentic_tool_config=str(bad))))
    assert "unknown tool `calculator`" in finding.message  # registry.ToolConfigError's wording
    ok = REPO / "recipes" / "tools" / "offline_local.yaml"
    assert not errors(run_checks("arpo", arpo_args(data_dir, agentic_tool_config=str(ok))))


def test_local_search_index_without_corpus_is_an_error_with_a_fix_for_own_data(data_dir):
    # issue 24 medium 12: was a warning whose fix named the ARPO release's data/arpo/search_cache.json
    findings = run_checks("arpo", arpo_args(data_dir, agentic_search_backend="local",
                                            agentic_search_index=str(data_dir / "no_index")))  # fmt: skip
    (finding,) = errors(findings)
    assert finding.subject == "local search index" and "every search call would fail" in finding.message
    assert f"{data_dir / 'no_index' / 'corpus.jsonl'}" in finding.fix and "`text` field" in finding.fix
    assert f"--cache-json <your cache>.json --output {data_dir / 'no_index'}" in finding.fix
    assert "data/arpo/search_cache.json" not in finding.fix
    # the fix works: a corpus of one's own documents in that folder, and the check passes
    (data_dir / "no_index").mkdir()
    (data_dir / "no_index" / "corpus.jsonl").write_text(json.dumps({"text": "Paris is the capital of France."}) + "\n")
    args = arpo_args(data_dir, agentic_search_backend="local", agentic_search_index=str(data_dir / "no_index"))
    assert not errors(run_checks("arpo", args))


def test_dataset_whose_rows_all_fail_is_a_format_error_naming_what_the_rows_look_like(data_dir):
    # issue 24 medium 10: an SFT file registered as arpo_rl gave "N malformed rows ... tick Skip bad rows" (and a
    # warning once ticked); the run then failed with "no valid rows left"
    info = json.loads((data_dir / "dataset_info.json").read_text())
    info["sft_as_rl"] = {"file_name": "sft.jsonl", "formatting": "arpo_rl"}
    (data_dir / "dataset_info.json").write_text(json.dumps(info))
    for skip in (False, True):
        findings = run_checks("arpo", arpo_args(data_dir, dataset="sft_as_rl", agentic_skip_bad_rows=skip))
        (finding,) = errors(findings)
        assert finding.subject == "dataset `sft_as_rl`"
        assert (
            "registered as `formatting: arpo_rl`, but none of its 6 rows is a valid `arpo_rl` row" in finding.message
        )
        assert "rows look like `arpo_sft`" in finding.message and "conversations" in finding.message
        assert '"formatting": "arpo_sft"' in finding.fix
        assert not [f for f in findings if f.level == "warning"]
    # some bad rows among good ones stay a row problem
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, dataset="rl_bad")))
    assert "1 malformed row (3)" in finding.message


def test_rl_file_registered_as_sft_is_named_as_rl_rows(data_dir):
    info = json.loads((data_dir / "dataset_info.json").read_text())
    info["rl_as_sft"] = {"file_name": "rl_ok.parquet", "formatting": "arpo_sft", "columns": {"messages": "prompt"}}
    (data_dir / "dataset_info.json").write_text(json.dumps(info))
    findings = run_checks("agentic_sft", arpo_args(data_dir, stage="agentic_sft", dataset="rl_as_sft"))
    (finding,) = errors(findings)
    assert "its 3 rows are not `arpo_sft` rows" in finding.message, finding.message
    assert "rows look like `arpo_rl`" in finding.message


def test_output_dir_holding_a_finished_run_is_a_warning(data_dir):
    # issue 24 medium 11: the checks said "No problems found" and Start resumed the finished run (step 5 of 4)
    run = data_dir / "arpo_done"
    (run / "checkpoint-4").mkdir(parents=True)
    (run / "training_args.yaml").write_text("stage: arpo\n")
    (run / "trainer_state.json").write_text(json.dumps({"global_step": 4, "max_steps": 4}))
    args = arpo_args(data_dir, output_dir=str(run))
    assert not [f for f in run_checks("arpo", args) if f.level != "info"]  # not finished yet: resuming is fine
    (run / "train_results.json").write_text(json.dumps({"train_loss": 0.0}))
    findings = run_checks("arpo", args, suggested_output_dir="arpo_new")
    (finding,) = [f for f in findings if f.level == "warning"]
    assert finding.subject == "output directory" and "holds a finished run (step 4 of 4)" in finding.message
    assert "resume" in finding.message and "`arpo_new`" in finding.fix
    assert "No problems found" not in format_findings(findings)


def test_bf16_without_a_bf16_device_is_an_error():
    # issue 24 low: bf16 on a CPU-only machine passed the checks; transformers refuses it after the start
    import torch

    from llamafactory_agentic.webui.checks import check_precision

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        pytest.skip("this machine supports bf16")
    (finding,) = check_precision({"bf16": True})
    assert finding.level == "error" and finding.subject == "`bf16`" and "fp32" in finding.fix
    assert check_precision({"bf16": True, "use_cpu": True}) == [] and check_precision({"fp16": False}) == []


def test_a_typed_value_that_replaces_the_stage_preset_is_noted(data_dir):
    # issue 24 low: ARPO -> AEPO kept typed values over AEPO's preset silently
    findings = run_checks("aepo", arpo_args(data_dir, stage="aepo", agentic_max_tool_calls=3))
    (note,) = [f for f in findings if f.subject == "`agentic_max_tool_calls`"]
    assert note.level == "info" and "the `aepo` preset's 6 does not apply" in note.message
    findings = run_checks("arpo", arpo_args(data_dir, agentic_max_tool_calls=3))  # equal to arpo's preset
    assert not [f for f in findings if f.subject == "`agentic_max_tool_calls`"]


def test_values_batch_geometry_sampling_and_reward(data_dir):
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, arpo_initial_rollouts=8)))
    assert "arpo_initial_rollouts" in finding.message  # the plugin's own argument validation (N <= M)
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, per_device_train_batch_size=3)))
    assert "must be a multiple of the trajectories per optimiser update" in finding.message
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, temperature=0.0)))
    assert "needs sampled rollouts" in finding.message
    (finding,) = errors(run_checks("arpo", arpo_args(data_dir, agentic_reward="f2")))
    assert "unknown reward 'f2'" in finding.message
    findings = run_checks("arpo", arpo_args(data_dir, arpo_rollout_log_ratio=0.0, top_p=0.7))
    assert {f.subject for f in findings if f.level == "info"} >= {"sampling", "`arpo_rollout_log_ratio`"}


def test_row_validation_is_cached_per_file_version(data_dir, monkeypatch):
    from llamafactory_agentic.webui import checks

    calls = []
    original = checks._load_raw_rows
    monkeypatch.setattr(checks, "_load_raw_rows", lambda *a: calls.append(a) or original(*a))
    args = arpo_args(data_dir, dataset="rl_bad")
    run_checks("arpo", args)
    run_checks("arpo", args)
    assert len(calls) == 1
    shutil.copy(data_dir / "rl_ok.parquet", data_dir / "rl.parquet")  # the user fixed the file
    assert not errors(run_checks("arpo", args))
    assert len(calls) == 2
