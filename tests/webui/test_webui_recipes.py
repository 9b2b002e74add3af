# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Load recipe (issue 35 deliver 4): a shipped recipe's keys split into LLaMA-Board's fields, the panel's and the rest.

Before, the panel started from AgenticArguments' defaults (M 16, 128 prompts, 4096 tokens) with no way to load a
recipe; the shipped `recipes/tiny/arpo_cpu.yaml` is read here as the picker reads it.
"""

import pytest

from llamafactory_agentic.webui.recipes import REPO_RECIPES, read_recipe, recipe_choices, recipe_form


LABELS = {"arpo": "ARPO (agentic RL)", "aepo": "AEPO (agentic RL)", "agentic_sft": "Agentic SFT", "sft": "SFT"}


def test_picker_lists_shipped_and_demo_recipes(tmp_path):
    demo = tmp_path / "saves" / "demo" / "recipes"
    demo.mkdir(parents=True)
    (demo / "arpo.yaml").write_text("stage: arpo\n")
    labels = dict(recipe_choices(tmp_path))
    assert "recipes: tiny/arpo_cpu.yaml" in labels and "package: synthetic/arpo_cpu.yaml" in labels
    assert labels["demo: arpo.yaml"] == str(demo / "arpo.yaml")
    assert not any(label.startswith(("recipes: tools/", "recipes: deepspeed/")) for label in labels)  # not recipes
    for path in labels.values():  # every listed recipe is readable by the picker's check
        read_recipe(path, tmp_path)


def test_tiny_arpo_recipe_fills_the_form():
    recipe, path = read_recipe(str(REPO_RECIPES / "tiny" / "arpo_cpu.yaml"))
    form = recipe_form(recipe, LABELS)
    board, panel, extra = form["board"], form["panel"], form["extra"]
    assert (
        board["train.training_stage"] == "ARPO (agentic RL)"
        and board["top.model_path"] == recipe["model_name_or_path"]
    )
    assert board["train.dataset"] == ["arpo_rl_reasoning_10k_local"] and board["top.template"] == "qwen"
    assert board["train.learning_rate"] == str(recipe["learning_rate"]) and board["train.output_dir"] == "arpo_cpu"
    assert board["train.batch_size"] == recipe["per_device_train_batch_size"] and board["train.compute_type"] == "fp32"
    assert panel["arpo_rollout_n"] == 4 and panel["arpo_rollout_backend"] == "hf" and panel["rollout_top_k"] == 0
    assert panel["agentic_skip_bad_rows"] is True
    # LLaMA-Board's report_to is a single-choice drop-down: a list there broke the page (`e.toLowerCase`)
    assert board["train.report_to"] == "none"
    assert recipe_form({"report_to": ["wandb", "tensorboard"]}, LABELS)["extra"] == {
        "report_to": ["wandb", "tensorboard"]
    }
    assert extra["max_steps"] == recipe["max_steps"] and extra["eval_dataset"] == "arpo_rl_valid_local"
    assert "do_train" not in extra and "stage" not in extra and "arpo_rollout_n" not in extra


def test_bad_recipes_are_named_not_echoed(tmp_path):
    (tmp_path / "list.yaml").write_text("- stage: arpo\n")
    (tmp_path / "broken.yaml").write_text("stage: arpo\nsecret: [hunter2\n")
    with pytest.raises(ValueError, match="is not a recipe"):
        read_recipe("list.yaml", tmp_path)
    with pytest.raises(ValueError, match=r"not valid YAML at line \d") as info:
        read_recipe("broken.yaml", tmp_path)
    assert "hunter2" not in str(info.value)
    with pytest.raises(ValueError, match="reads only recipes"):
        read_recipe("/etc/shadow", tmp_path)
    with pytest.raises(ValueError, match="stage `ppo2` is not one of"):
        recipe_form({"stage": "ppo2"}, LABELS)
