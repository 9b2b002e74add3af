# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""Pre-run checks of `stage: arpo` / `aepo` through LLaMA-Factory's `run_exp` (in-process, tiny model, CPU).

The checks must stop the run before the policy is loaded: `llamafactory.model.load_model` is replaced by a function
that raises, so a run that gets past the checks fails with that sentinel instead.
"""

import json

import pytest


class ModelLoaded(RuntimeError):
    pass


def _rl_dataset(root):
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset_info.json").write_text(json.dumps({"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}}))
    row = {"prompt": [{"role": "user", "content": "What is 1 + 2?"}], "reward_model": {"ground_truth": "3"}}
    (root / "rl.jsonl").write_text(json.dumps(row) + "\n")
    return root


def _run(tmp_path, model_dir, monkeypatch, stage, **extra):
    import llamafactory.model

    import llamafactory_agentic

    llamafactory_agentic.register()
    from llamafactory.train.tuner import run_exp

    def refuse(*args, **kwargs):
        raise ModelLoaded("the policy was loaded")

    monkeypatch.setattr(llamafactory.model, "load_model", refuse)
    args = {
        "model_name_or_path": str(model_dir),
        "stage": stage,
        "do_train": True,
        "finetuning_type": "full",
        "dataset": "rl",
        "dataset_dir": str(_rl_dataset(tmp_path / "data")),
        "template": "qwen",
        "cutoff_len": 1024,
        "overwrite_cache": True,
        "output_dir": str(tmp_path / "out"),
        "per_device_train_batch_size": 4,
        "arpo_rollout_n": 4,
        "arpo_initial_rollouts": 2,
        "arpo_rollout_batch_size": 1,
        "max_steps": 1,
        "report_to": "none",
        "use_cpu": True,
        "cache_dir": str(tmp_path / "cache"),
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
    }
    args.update(extra)
    run_exp(args=args)


@pytest.mark.parametrize("stage", ["arpo", "aepo"])
def test_rl_refuses_a_tokenizer_whose_tags_are_special_tokens(tmp_path, tiny_model_dir, monkeypatch, stage):
    """Issue 8 item 3: with `<answer>` a special token the model view drops it and every answer scores -1 silently."""
    import shutil

    from transformers import AutoTokenizer

    from llamafactory_agentic.train.agentic_sft.check import AgenticSFTCheckError

    model_dir = tmp_path / "special-tags"
    shutil.copytree(tiny_model_dir, model_dir)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<answer>", "</answer>"]})
    tokenizer.save_pretrained(str(model_dir))
    with pytest.raises(AgenticSFTCheckError) as info:
        _run(tmp_path, model_dir, monkeypatch, stage)
    message = str(info.value)
    assert "<answer> is a special token of the tokenizer (decoding skips it)" in message
    assert "</answer> is a special token" in message
    assert "Use the model's original tokenizer without extra special tokens for the tags" in message


def test_rl_with_an_ordinary_tokenizer_passes_the_checks(tmp_path, tiny_model_dir, monkeypatch):
    with pytest.raises(ModelLoaded):  # every check passed: the run went on to load the policy
        _run(tmp_path, tiny_model_dir, monkeypatch, "arpo")


def test_overlong_prompt_error_stops_the_run_before_the_policy_loads(tmp_path, tiny_model_dir, monkeypatch):
    from llamafactory_agentic.data import RLDataError

    with pytest.raises(RLDataError, match=r"^rl\.jsonl row 0: the prompt is \d+ tokens, longer than arpo_max_prompt"):
        _run(tmp_path, tiny_model_dir, monkeypatch, "arpo", arpo_max_prompt_length=8, arpo_overlong_prompt="error")


def test_tool_executor_is_built_first_and_closed_when_the_run_stops(tmp_path, tiny_model_dir, monkeypatch):
    """The executor is built before the tokenizer (a bad tool config or a weak sandbox stops the run at once) and is
    closed (cache writes flushed, workers stopped) when a later step fails."""
    import llamafactory.model

    import llamafactory_agentic.tools

    events, built = [], []
    build, load_tokenizer = llamafactory_agentic.tools.build_executor_from_args, llamafactory.model.load_tokenizer

    def recording_build(config, **kwargs):
        events.append("executor")
        built.append(build(config, **kwargs))
        return built[-1]

    def recording_load_tokenizer(*args, **kwargs):
        events.append("tokenizer")
        return load_tokenizer(*args, **kwargs)

    monkeypatch.setattr(llamafactory_agentic.tools, "build_executor_from_args", recording_build)
    monkeypatch.setattr(llamafactory.model, "load_tokenizer", recording_load_tokenizer)
    with pytest.raises(ModelLoaded):
        _run(tmp_path, tiny_model_dir, monkeypatch, "arpo", agentic_cache_path=str(tmp_path / "cache.sqlite"))
    assert events == ["executor", "tokenizer"]
    assert built[0]._closed and built[0].cache._closing


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        ("nosuchmod:fn", r"`agentic_reward: nosuchmod:fn`: cannot import reward module 'nosuchmod'"),
        ("prerun_reward_mod:two_args", r"called as fn\(model_text, ground_truth, metadata\), but two_args"),
        ("f2", r"`agentic_reward: f2`: unknown reward 'f2'"),
    ],
)
def test_reward_import_and_signature_are_checked_before_the_policy_loads(
    tmp_path, tiny_model_dir, monkeypatch, reward, message
):
    """Issue 24 item 6: old code built the reward after `load_model`, so these runs got as far as loading the policy."""
    (tmp_path / "prerun_reward_mod.py").write_text("def two_args(model_text, ground_truth):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=message):
        _run(tmp_path, tiny_model_dir, monkeypatch, "arpo", agentic_reward=reward)


@pytest.mark.parametrize(
    ("funcs", "extra", "message"),
    [
        ("f1:1.0,nosuchmod:fn:0.5", {}, r"`agentic_reward_funcs` entry 'nosuchmod:fn'.*cannot import reward module"),
        ("f1,prerun_reward_mod:two_args", {}, r"'prerun_reward_mod:two_args'.*called as fn\(model_text, ground"),
        ("f1:1.0,format:x", {}, r"`agentic_reward_funcs`: entry 'format:x': the weight 'x' is not a number"),
        ("f1,nosuch", {}, r"entry 'nosuch': unknown reward 'nosuch'.*Fix the entry"),
        ("f1,judge:0.5", {}, r"entry 'judge' needs the judge: set agentic_reward_judge_url"),
        ("f1,mean", {}, r"`reward/mean` is already a metric"),
        ("f1,f1:0.5", {}, r"reward 'f1' is listed twice"),
        ("format", {"agentic_reward": "em"}, r"`agentic_reward: em` and `agentic_reward_funcs: format` both name"),
    ],
)
def test_every_reward_of_agentic_reward_funcs_is_checked_before_the_policy_loads(
    tmp_path, tiny_model_dir, monkeypatch, funcs, extra, message
):
    """Issue 28 item 2: each weighted reward's import, signature and settings fail at parse time, naming key and fix."""
    (tmp_path / "prerun_reward_mod.py").write_text("def two_args(model_text, ground_truth):\n    return 1.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=message):
        _run(tmp_path, tiny_model_dir, monkeypatch, "arpo", agentic_reward_funcs=funcs, **extra)


def test_a_valid_compound_reward_passes_the_checks_without_calling_the_judge(tmp_path, tiny_model_dir, monkeypatch):
    """The checks build every component (the judge only checked, nothing opened) and the run reaches the policy."""
    (tmp_path / "prerun_context_mod.py").write_text(
        "def with_context(model_text, ground_truth, metadata, context):\n    return 0.0\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModelLoaded):
        _run(
            tmp_path,
            tiny_model_dir,
            monkeypatch,
            "arpo",
            agentic_reward_funcs="f1:1.0,format:0.2,tool_efficiency:0.1,judge:0.5,prerun_context_mod:with_context:0.5",
            agentic_reward_judge_url="http://127.0.0.1:9/v1",  # nothing listens there: no call is made at parse time
            agentic_reward_judge_model="judge",
        )
    assert not (tmp_path / "out" / "judge_cache.sqlite").exists()
