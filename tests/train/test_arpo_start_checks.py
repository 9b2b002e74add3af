# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Start checks of `stage: arpo` through LLaMA-Factory's `run_exp` (in-process, tiny model, CPU), issue 24.

As in `test_arpo_prerun.py`, `llamafactory.model.load_model` raises `ModelLoaded`, so a run that gets past the checks
fails with that sentinel instead of training.
"""

import json
import shutil

import pytest

from .test_arpo_prerun import ModelLoaded, _run


def _without_chat_template(tiny_model_dir, root):
    model_dir = root / "no-chat-template"
    shutil.copytree(tiny_model_dir, model_dir)
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    (model_dir / "chat_template.jinja").unlink(missing_ok=True)
    return model_dir


def test_no_template_and_no_chat_template_is_refused_at_tokenizer_load(tmp_path, tiny_model_dir, monkeypatch):
    """Before: LLaMA-Factory fell back to its `empty` template with a warning, the run trained (every reward -1) and
    ended with status 0; here that showed as the policy being loaded (`ModelLoaded`)."""
    from transformers import AutoTokenizer

    model_dir = _without_chat_template(tiny_model_dir, tmp_path)
    assert AutoTokenizer.from_pretrained(str(model_dir)).chat_template is None
    with pytest.raises(ValueError) as info:
        _run(tmp_path, model_dir, monkeypatch, "arpo", template=None)
    message = str(info.value)
    assert message.startswith(f"No `template` is set and the tokenizer of {model_dir} has no chat template")
    assert "every reward would be -1" in message and "Set `template: <name>`" in message
    assert "`template: qwen` for Qwen2/2.5" in message


def test_no_template_with_a_tokenizer_chat_template_still_runs(tmp_path, tiny_model_dir, monkeypatch):
    """Without `template` LLaMA-Factory parses the tokenizer's chat template: that is kept."""
    from transformers import AutoTokenizer

    model_dir = _without_chat_template(tiny_model_dir, tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    tokenizer.save_pretrained(str(model_dir))
    with pytest.raises(ModelLoaded):
        _run(tmp_path, model_dir, monkeypatch, "arpo", template=None)


def test_explicit_resume_from_an_interrupted_checkpoint_is_refused_before_the_model_loads(
    tmp_path, tiny_model_dir, monkeypatch
):
    """Before: the run loaded the model and failed in Trainer.train with FileNotFoundError (trainer_state.json)."""
    out = tmp_path / "out"
    (out / "checkpoint-2").mkdir(parents=True)
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    (out / "checkpoint-4").mkdir()
    (out / "checkpoint-4" / "model.safetensors").write_bytes(b"partial")
    with pytest.raises(ValueError) as info:
        _run(tmp_path, tiny_model_dir, monkeypatch, "arpo", resume_from_checkpoint=str(out / "checkpoint-4"))
    assert str(info.value) == (
        f"resume_from_checkpoint {out / 'checkpoint-4'} cannot be resumed from: it has no trainer_state.json, the file "
        f"Transformers writes last: the save was interrupted. Delete it and use resume_from_checkpoint: "
        f"{out / 'checkpoint-2'}."
    )


def test_an_empty_thought_in_the_prompt_with_the_reference_format_gate_is_warned(plugin_caplog):
    """qwen3 with enable_thinking: false ends every prompt with `<think>\\n\\n</think>`: the policy writes no thought,
    and the reference reward's format rule 1 scores every trajectory -1 (found by the native qwen3 e2e run)."""
    from types import SimpleNamespace

    from llamafactory_agentic.train.arpo.workflow import _warn_empty_thought

    template = SimpleNamespace(thought_words=("<think>\n", "\n</think>\n\n"), enable_thinking=False)
    data_args = SimpleNamespace(template="qwen3", enable_thinking=False)
    args = SimpleNamespace(agentic_reward_funcs=None, agentic_reward="f1")
    _warn_empty_thought(template, data_args, args)
    assert "enable_thinking: false ends every prompt with an empty thought" in plugin_caplog.text
    plugin_caplog.clear()
    _warn_empty_thought(SimpleNamespace(thought_words=("<think>", "</think>"), enable_thinking=True),
                        SimpleNamespace(template="qwen3", enable_thinking=True), args)  # fmt: skip
    _warn_empty_thought(template, data_args, SimpleNamespace(agentic_reward_funcs="f1:1.0", agentic_reward="f1"))
    _warn_empty_thought(SimpleNamespace(), SimpleNamespace(template="qwen", enable_thinking=False), args)
    assert "empty thought" not in plugin_caplog.text
