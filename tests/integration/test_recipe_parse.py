# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Every shipped recipe goes through LLaMA-Factory's own `get_train_args` with the plugin active (issue 25, item 4a).

No model, tokenizer or data set is loaded and no network is used (the socket is closed for the test): hub names
such as `Qwen/Qwen2.5-7B-Instruct` stay strings. What a real launch would check on top of the parse is checked here
too, without loading anything:

* DeepSpeed: the config path resolves (relative to the repository root, as the recipes' run lines use it), the JSON
  is valid and its ZeRO stage and offload match the file name. DeepSpeed is usually not installed on the CPU runner,
  so `deepspeed` is taken out of the arguments and LLaMA-Factory's ZeRO-3 refusals (`pure_bf16`, `pissa_init`,
  `predict_with_generate`, Unsloth, ...) run with `is_deepspeed_zero3_enabled` answering from the JSON; GaLore and
  APOLLO, which LLaMA-Factory refuses with any DeepSpeed config, are refused here. Where DeepSpeed is installed,
  Transformers' `HfTrainerDeepSpeedConfig` reads the file as well. A DeepSpeed recipe's run line needs
  `FORCE_TORCHRUN=1` (LLaMA-Factory refuses DeepSpeed outside a distributed launch).
* `arpo`/`aepo`: greedy decoding is refused, the presets resolve and `build_run_config` builds every config object
  (TRL's GRPOConfig, loss, rollout, tools) at the recipe's world size (8 for `recipes/arpo` and `recipes/aepo`, 1 for
  the CPU recipes, 2 more where the run line starts 2 ranks); the tool config file loads.
* `agentic_sft`: the inline-tag template is prepared (`prepare_agentic_sft` refuses `tool_format` and more).
* The template is one LLaMA-Factory knows and the data sets are entries of `dataset_dir/dataset_info.json`.

`bf16` is turned off where no GPU is present (Transformers refuses bf16 on CPU); nothing else is changed but
`output_dir`.
"""

import json
import re
import socket
from pathlib import Path

import pytest
import yaml

import llamafactory_agentic


REPO = Path(__file__).resolve().parents[2]
PACKAGED = REPO / "llamafactory_agentic" / "resources" / "recipes"
TOOL_CONFIGS = REPO / "recipes" / "tools"
TRAIN_RECIPES = sorted(p for p in (REPO / "recipes").rglob("*.yaml") if TOOL_CONFIGS not in p.parents)
TRAIN_RECIPES += sorted(PACKAGED.rglob("*.yaml"))
# file name -> (ZeRO stage, parameters and optimiser states offloaded to the CPU)
DEEPSPEED_CONFIGS = {
    "ds_z2_config.json": (2, False),
    "ds_z3_config.json": (3, False),
    "ds_z3_offload_config.json": (3, True),
}
MULTI_GPU_DIRS = {"arpo", "aepo", "agentic_sft"}  # recipes written for 8 GPUs (docs/algorithms.md §10)


class RecipeError(AssertionError):
    """A recipe that LLaMA-Factory or the plugin would refuse at launch."""


def _id(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Any connection attempt fails the test: the parse must not reach the model hub."""

    def refuse(self, address):
        raise RecipeError(f"the parse tried to open a connection to {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for key in ("BRIGHTDATA_API_KEY", "SERPER_API_KEY"):  # the web tool configs read them; no request is sent
        monkeypatch.setenv(key, "placeholder-key")
    monkeypatch.delenv("ALLOW_EXTRA_ARGS", raising=False)  # unknown keys must be refused


@pytest.fixture(scope="module")
def plugin():
    llamafactory_agentic.register()
    import llamafactory.hparams.parser as parser_module

    return parser_module


def check_deepspeed_config(recipe: Path, value: str) -> tuple[int, bool]:
    """Validate a recipe's `deepspeed` value; return (ZeRO stage, offload).

    Raises:
        RecipeError: the path does not resolve, the JSON is invalid, or its stage/offload do not match its name.
    """
    path = REPO / value
    if not path.is_file():
        raise RecipeError(f"{_id(recipe)}: `deepspeed: {value}` does not exist (relative to the repository root)")
    try:
        config = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise RecipeError(f"{_id(recipe)}: {value} is not valid JSON: {err}") from err
    zero = config.get("zero_optimization", {})
    stage = zero.get("stage")
    offload = all(zero.get(k, {}).get("device") == "cpu" for k in ("offload_param", "offload_optimizer"))
    expected = DEEPSPEED_CONFIGS.get(path.name)
    if expected is None:
        raise RecipeError(f"{_id(recipe)}: {value} is not one of the shipped configs {sorted(DEEPSPEED_CONFIGS)}")
    if (stage, offload) != expected:
        raise RecipeError(f"{value}: ZeRO stage {stage}, offload {offload}; its name says {expected}")
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size"):
        if config.get(key) != "auto":  # Transformers fills these from the recipe; a number could contradict it
            raise RecipeError(f'{value}: `{key}` must be "auto", got {config.get(key)!r}')
    try:
        import deepspeed  # noqa: F401
        from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig
    except ImportError:
        pass  # DeepSpeed not installed: the JSON checks above stand in for its parser
    else:
        HfTrainerDeepSpeedConfig(str(path))
    return stage, offload


def world_sizes(recipe: Path, text: str) -> list[int]:
    """Process counts a recipe is written for: 8 for the GPU recipes, 1 otherwise, plus any NPROC_PER_NODE=N."""
    sizes = {8} if recipe.parent.name in MULTI_GPU_DIRS and recipe.parent.parent.name == "recipes" else {1}
    sizes |= {int(n) for n in re.findall(r"NPROC_PER_NODE=(\d+)", text)}
    return sorted(sizes)


def check_recipe(recipe: Path, output_dir: Path, parser_module, monkeypatch) -> dict:
    """Parse one recipe as `llamafactory-cli train` would and run the plugin's launch checks without loading.

    Returns:
        A summary: stage, finetuning type, deepspeed (stage, offload) or None, rollout backend, world sizes.

    Raises:
        RecipeError, ValueError, FileNotFoundError: what the launch would refuse, naming the recipe.
    """
    import torch
    from llamafactory.data.template import TEMPLATES

    text = recipe.read_text()
    args = yaml.safe_load(text)
    args["output_dir"] = str(output_dir)
    if not torch.cuda.is_available():
        args["bf16"] = False  # Transformers refuses bf16 without a GPU; the GPU recipes keep it there
    zero = None
    if args.get("deepspeed"):
        zero = check_deepspeed_config(recipe, args.pop("deepspeed"))
        if "FORCE_TORCHRUN=1" not in text:
            raise RecipeError(f"{_id(recipe)}: names DeepSpeed but its run line lacks FORCE_TORCHRUN=1")
        for key in ("use_galore", "use_apollo"):
            if args.get(key):
                raise RecipeError(f"{_id(recipe)}: `{key}` is incompatible with DeepSpeed (LLaMA-Factory refuses it)")
    # LLaMA-Factory's ZeRO-3 refusals read the DeepSpeed config Transformers registered: answer from the JSON
    monkeypatch.setattr(parser_module, "is_deepspeed_zero3_enabled", lambda: zero is not None and zero[0] == 3)
    try:
        model_args, data_args, training_args, finetuning_args, generating_args = parser_module.get_train_args(args)
    except (ValueError, SystemExit) as err:
        raise RecipeError(f"{_id(recipe)}: LLaMA-Factory's parser refused it: {err}") from err

    if data_args.template not in TEMPLATES:
        raise RecipeError(f"{_id(recipe)}: unknown template {data_args.template!r}")
    dataset_info = REPO / data_args.dataset_dir / "dataset_info.json"
    if recipe.parent.parent == REPO / "recipes":  # the packaged recipes name the demo workdir's data
        names = json.loads(dataset_info.read_text())
        for name in (data_args.dataset or []) + (data_args.eval_dataset or []):
            if name not in names:
                raise RecipeError(f"{_id(recipe)}: data set {name!r} is not in {dataset_info.relative_to(REPO)}")

    stage = finetuning_args.agentic_stage or finetuning_args.stage
    sizes = world_sizes(recipe, text)
    if stage in ("arpo", "aepo"):
        from llamafactory_agentic.tools.registry import load_tool_config
        from llamafactory_agentic.train.arpo.config import build_run_config, check_rl_sampling
        from llamafactory_agentic.train.presets import resolve_presets

        if training_args.do_train:
            check_rl_sampling(generating_args)
        resolve_presets(finetuning_args, verbose=False)
        for world in sizes:
            build_run_config(training_args, finetuning_args, generating_args, eos_token_id=0, world_size=world)
        if finetuning_args.agentic_tool_config:
            load_tool_config(str(REPO / finetuning_args.agentic_tool_config))
    elif stage == "agentic_sft":
        from llamafactory_agentic.train.agentic_sft.workflow import prepare_agentic_sft

        prepare_agentic_sft(data_args, finetuning_args)
    return {
        "stage": stage,
        "finetuning_type": finetuning_args.finetuning_type,
        "zero": zero,
        "backend": getattr(finetuning_args, "arpo_rollout_backend", None) if stage in ("arpo", "aepo") else None,
        "world_sizes": sizes,
        "model": model_args.model_name_or_path,
    }


def test_every_yaml_under_recipes_is_covered():
    assert not list((REPO / "recipes").rglob("*.yml")) and not list(PACKAGED.rglob("*.yml"))  # .yaml only
    assert list(TOOL_CONFIGS.glob("*.yaml"))  # tool configs: tests/tools/test_tools_recipe_configs.py
    assert len(TRAIN_RECIPES) >= 18 and any(PACKAGED in p.parents for p in TRAIN_RECIPES)


@pytest.mark.parametrize("recipe", TRAIN_RECIPES, ids=_id)
def test_recipe_parses_with_the_plugin(recipe, tmp_path, plugin, monkeypatch):
    summary = check_recipe(recipe, tmp_path / "out", plugin, monkeypatch)
    directory = recipe.parent.name
    if directory in ("arpo", "aepo", "agentic_sft"):
        assert summary["stage"] == directory
    if summary["zero"] is not None:  # the GPU recipes run distributed on 8 GPUs
        assert summary["world_sizes"] == [8]


def test_recipes_cover_the_engine_combinations(plugin, tmp_path, monkeypatch):
    """The combinations the GPU smoke script (benchmarks/recipe_smoke_gpu.py) runs are the ones the recipes use."""
    seen = set()
    for i, recipe in enumerate(TRAIN_RECIPES):
        s = check_recipe(recipe, tmp_path / str(i), plugin, monkeypatch)
        if s["stage"] in ("arpo", "aepo") and s["zero"] is not None:
            seen.add((s["zero"], s["backend"], s["finetuning_type"]))
    assert ((3, False), "vllm", "full") in seen and ((3, False), "hf", "lora") in seen


# The checker refuses what a launch would refuse (each case fails the parse test were it in a shipped recipe)
BAD = {
    "unknown key": ({"arpo_rollout_m": 4}, "LLaMA-Factory's parser refused"),
    "missing deepspeed file": ({"deepspeed": "recipes/deepspeed/ds_z4_config.json"}, "does not exist"),
    "ZeRO-3 with pure_bf16": ({"pure_bf16": True}, "incompatible with DeepSpeed ZeRO-3"),
    "greedy RL": ({"do_sample": False}, "sampled rollouts"),
    "rollout batch not split over 8 ranks": ({"arpo_rollout_batch_size": 12}, "multiple of the world size"),
    "bad backend": ({"arpo_rollout_backend": "sglang"}, "arpo_rollout_backend"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_checker_refuses_a_broken_recipe(case, tmp_path, plugin, monkeypatch):
    change, message = BAD[case]
    source = REPO / "recipes" / "arpo" / "qwen2.5_7b_reasoning_full.yaml"
    broken = source.parent / f"_broken_{tmp_path.name}.yaml"  # in place, so relative paths and world size still apply
    args = yaml.safe_load(source.read_text())
    args.update(change)
    header = "# FORCE_TORCHRUN=1 llamafactory-cli train ...\n"
    broken.write_text(header + yaml.safe_dump(args))
    try:
        with pytest.raises((RecipeError, ValueError)) as info:
            if case == "ZeRO-3 with pure_bf16":  # LLaMA-Factory asks the device before the ZeRO-3 check
                import llamafactory.hparams.parser as parser_module

                monkeypatch.setattr(parser_module, "is_torch_bf16_gpu_available", lambda: True)
            check_recipe(broken, tmp_path / "out", plugin, monkeypatch)
        assert message in str(info.value)
    finally:
        broken.unlink()


def test_deepspeed_configs_match_their_names():
    for name, expected in DEEPSPEED_CONFIGS.items():
        assert check_deepspeed_config(REPO / "recipes" / "x.yaml", f"recipes/deepspeed/{name}") == expected
