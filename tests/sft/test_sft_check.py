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

"""The agentic SFT pre-run check and `run_agentic_sft` (real LLaMA-Factory SFT on the tiny model)."""

import json
from pathlib import Path

import pytest


REPO_DATA = Path(__file__).resolve().parents[2] / "data"


def _args(tmp_path, dataset, dataset_dir, template, **data_kwargs):
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import Seq2SeqTrainingArguments

    data_args = DataArguments(
        dataset=dataset, dataset_dir=str(dataset_dir), template=template, cutoff_len=2048, **data_kwargs
    )
    model_args = ModelArguments(model_name_or_path="unused", cache_dir=str(tmp_path / "cache"))
    training_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    return model_args, data_args, training_args


def _tokenizer_and_template(tiny_model_dir, data_args):
    from llamafactory.data import get_template_and_fix_tokenizer
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    return tokenizer, get_template_and_fix_tokenizer(tokenizer, data_args)


def test_tiny_tokenizer_passes_the_tag_check(tiny_model_dir):
    from transformers import AutoTokenizer

    from llamafactory_agentic.train.agentic_sft.check import check_tokenizer_tags

    check_tokenizer_tags(AutoTokenizer.from_pretrained(str(tiny_model_dir)))


def test_tag_check_rejects_special_and_added_tags_but_allows_qwen3_think(tiny_model_dir):
    from transformers import AutoTokenizer

    from llamafactory_agentic.train.agentic_sft.check import AgenticSFTCheckError, check_tokenizer_tags

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_tokens(["<think>", "</think>"])  # Qwen3 ships these as ordinary added tokens
    check_tokenizer_tags(tokenizer)

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_tokens(["<search>"], special_tokens=True)
    with pytest.raises(AgenticSFTCheckError, match="<search> is a special token"):
        check_tokenizer_tags(tokenizer)

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    tokenizer.add_tokens(["</result>"])
    with pytest.raises(AgenticSFTCheckError, match="</result> is an added token"):
        check_tokenizer_tags(tokenizer)


def test_template_check_rejects_the_base_template_and_accepts_the_inline_variant(tmp_path, tiny_model_dir):
    from llamafactory_agentic.data.inline_template import get_inline_template_name
    from llamafactory_agentic.train.agentic_sft.check import AgenticSFTCheckError, check_template_renders

    _, data_args, _ = _args(tmp_path, None, REPO_DATA, "qwen")
    tokenizer, template = _tokenizer_and_template(tiny_model_dir, data_args)
    with pytest.raises(AgenticSFTCheckError, match="template qwen cannot render an inline tool call"):
        check_template_renders(template, tokenizer, "qwen")

    _, data_args, _ = _args(tmp_path, None, REPO_DATA, get_inline_template_name("qwen"))
    tokenizer, template = _tokenizer_and_template(tiny_model_dir, data_args)
    check_template_renders(template, tokenizer, "qwen_agentic")


def test_pre_run_check_on_the_demo_set(tmp_path, tiny_model_dir, capsys):
    from llamafactory_agentic.data.inline_template import get_inline_template_name
    from llamafactory_agentic.train.agentic_sft.check import run_pre_run_check

    model_args, data_args, training_args = _args(
        tmp_path, "arpo_sft_demo", REPO_DATA, get_inline_template_name("qwen")
    )
    data_args.agentic_sft_mask_results = True
    tokenizer, template = _tokenizer_and_template(tiny_model_dir, data_args)
    report = run_pre_run_check(template, tokenizer, model_args, data_args, training_args)
    printed = capsys.readouterr().out

    assert report.rows == 6 and report.tool_calls == 7 and report.bad_rows == []
    assert 0 < report.result_tokens < report.masked_tokens < report.tokens
    assert report.masked_tokens == report.prompt_tokens + report.result_tokens
    # the first demo row: system and question masked, then the call trained, the result masked, the answer trained
    assert report.sample.startswith("[MASKED><|im_start|>system\nYou are a helpful assistant")
    assert "<|im_start|>assistant\n<MASKED]<think> I can compute" in report.sample
    assert "</python>[MASKED> <result>\n385\n</result><MASKED] <think> The interpreter" in report.sample
    assert report.sample.endswith("</answer><|im_end|>\n")
    assert report.sample in printed
    share = f"{100 * report.masked_share:.1f}% masked"
    assert f"[agentic-sft] 6 rows, {report.tokens} tokens: {share}" in printed


def _bad_dataset(root):
    root.mkdir(parents=True, exist_ok=True)
    info = {
        "bad_sft": {
            "file_name": "bad_sft.jsonl",
            "formatting": "arpo_sft",
            "columns": {"messages": "conversations", "system": "system"},
        }
    }
    (root / "dataset_info.json").write_text(json.dumps(info))
    good = "<search> q </search> <result>\nR\n</result> <answer> A </answer>"
    texts = [
        good,
        "<think> open <search> q </search> <result>\nR\n</result> <answer> A </answer>",
        good,
        "<search> q </search> <result>\nR\n</result> <answer> A </answer> </search>",
    ]
    rows = [
        {"system": "S", "conversations": [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": t}]}
        for t in texts
    ]
    (root / "bad_sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_unbalanced_tags_error_names_dataset_row_and_tag(tmp_path, tiny_model_dir):
    from llamafactory_agentic.data.inline_template import get_inline_template_name
    from llamafactory_agentic.train.agentic_sft.check import AgenticSFTCheckError, check_sft_datasets

    _bad_dataset(tmp_path / "d")
    model_args, data_args, training_args = _args(tmp_path, "bad_sft", tmp_path / "d", get_inline_template_name("qwen"))
    tokenizer, template = _tokenizer_and_template(tiny_model_dir, data_args)
    with pytest.raises(AgenticSFTCheckError) as info:
        check_sft_datasets(template, tokenizer, model_args, data_args, training_args)
    message = str(info.value)
    assert message.startswith(
        "dataset bad_sft (bad_sft.jsonl) row 1: tag <think>: <think> at character 0 is never closed"
    )
    assert "(1 more such rows)" in message and "agentic_skip_bad_rows: true" in message

    report = check_sft_datasets(template, tokenizer, model_args, data_args, training_args, skip_bad_rows=True)
    assert report.rows == 2
    assert [line.split(":")[0] for line in report.bad_rows] == ["bad_sft row 1", "bad_sft row 3"]
    assert "tag </search>" in report.bad_rows[1]


@pytest.mark.slow
def test_run_agentic_sft_trains_the_tiny_model_with_the_inline_template(tmp_path, tiny_model_dir, capsys):
    """Real LLaMA-Factory SFT (2 steps on CPU) through `run_agentic_sft`; the plugin fields are set by hand here."""
    from llamafactory.hparams import get_train_args

    from llamafactory_agentic.train.agentic_sft.workflow import run_agentic_sft

    output_dir = tmp_path / "saves"
    model_args, data_args, training_args, finetuning_args, generating_args = get_train_args(
        {
            "model_name_or_path": str(tiny_model_dir),
            "stage": "sft",
            "do_train": True,
            "finetuning_type": "full",
            "dataset": "arpo_sft_demo",
            "dataset_dir": str(REPO_DATA),
            "template": "qwen",
            "cutoff_len": 1024,
            "overwrite_cache": True,
            "output_dir": str(output_dir),
            "per_device_train_batch_size": 2,
            "max_steps": 2,
            "learning_rate": 1e-4,
            "logging_steps": 1,
            "save_strategy": "no",
            "report_to": "none",
            "use_cpu": True,
            "cache_dir": str(tmp_path / "cache"),
        }
    )
    finetuning_args.agentic_tool_protocol = "inline_tags"
    finetuning_args.agentic_sft_mask_results = True
    finetuning_args.agentic_sft_check = True
    finetuning_args.agentic_skip_bad_rows = False
    run_agentic_sft(model_args, data_args, training_args, finetuning_args, generating_args, callbacks=[])

    assert data_args.template == "qwen_agentic" and data_args.agentic_sft_mask_results is True
    printed = capsys.readouterr().out
    assert "[agentic-sft] pre-run check: rendered sample" in printed
    assert "[MASKED> <result>\n385\n</result><MASKED]" in printed
    assert (output_dir / "model.safetensors").exists()
    history = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    losses = [(entry["step"], entry["loss"]) for entry in history if "loss" in entry]
    assert [step for step, _ in losses] == [1, 2]
    assert all(loss > 0 for _, loss in losses)


def test_inline_protocol_needs_a_template_and_no_tool_format(tmp_path):
    from types import SimpleNamespace

    from llamafactory_agentic.train.agentic_sft.workflow import prepare_agentic_sft

    fa = SimpleNamespace(agentic_tool_protocol="inline_tags", agentic_sft_mask_results=False)
    _, data_args, _ = _args(tmp_path, None, REPO_DATA, None)
    with pytest.raises(ValueError, match="needs `template`"):
        prepare_agentic_sft(data_args, fa)
    _, data_args, _ = _args(tmp_path, None, REPO_DATA, "qwen", tool_format="qwen")
    with pytest.raises(ValueError, match="tool_format"):
        prepare_agentic_sft(data_args, fa)
    _, data_args, _ = _args(tmp_path, None, REPO_DATA, "llama3")
    prepare_agentic_sft(data_args, fa)
    assert data_args.template == "llama3_agentic" and data_args.agentic_sft_mask_results is False
    prepare_agentic_sft(data_args, fa)  # idempotent
    assert data_args.template == "llama3_agentic"
    fa.agentic_tool_protocol = "template"
    _, data_args, _ = _args(tmp_path, None, REPO_DATA, "qwen")
    prepare_agentic_sft(data_args, fa)
    assert data_args.template == "qwen" and data_args.agentic_tool_protocol == "template"
