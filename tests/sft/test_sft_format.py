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

"""`arpo_sft` conversion and the inline-tag templates through LLaMA-Factory's real get_dataset / processor."""

import json
from pathlib import Path

import pytest


IGNORE = -100
REPO_DATA = Path(__file__).resolve().parents[2] / "data"
SYSTEM = "You may search with <search> </search> and run code with <python> </python>."
QUESTION = "How old was the college in 2024?"
CHUNKS = [
    ("function", "<think> I need the founding year. </think>\n<search> Balliol College founded </search>"),
    ("observation", "Page 1: Balliol College was founded in 1263."),
    ("function", " <think> Now subtract. </think>\n<python>\nprint(2024 - 1263)\n</python>"),
    ("observation", "761"),
    ("assistant", " <think> Done. </think> <answer> The final answer is \\[ \\boxed{761} \\] </answer>"),
]
INLINE = (
    CHUNKS[0][1]
    + " <result>\n"
    + CHUNKS[1][1]
    + "\n</result>"
    + CHUNKS[2][1]
    + " <result>\n"
    + CHUNKS[3][1]
    + "\n</result>"
    + CHUNKS[4][1]
)
ROLE_TAG = {"function": "function_call", "observation": "observation", "assistant": "gpt"}


def _inline_row(text=INLINE):
    return {"system": SYSTEM, "conversations": [{"from": "human", "value": QUESTION}, {"from": "gpt", "value": text}]}


def _turns_row():
    turns = [{"from": ROLE_TAG[role], "value": content} for role, content in CHUNKS]
    return {"system": SYSTEM, "conversations": [{"from": "human", "value": QUESTION}] + turns}


def _write_dataset(root, rows, name="traj"):
    root.mkdir(parents=True, exist_ok=True)
    info = {
        name: {
            "file_name": f"{name}.jsonl",
            "formatting": "arpo_sft",
            "columns": {"messages": "conversations", "system": "system"},
        }
    }
    (root / "dataset_info.json").write_text(json.dumps(info))
    (root / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return name


def _sft(tmp_path, tiny_model_dir, dataset, dataset_dir, template, mask_results=True, overwrite_cache=True):
    """Tokenised rows from LLaMA-Factory's own `get_dataset(stage="sft")` with the inline-tag template."""
    from llamafactory.data import get_dataset, get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import AutoTokenizer, Seq2SeqTrainingArguments

    from llamafactory_agentic.data.inline_template import get_inline_template_name

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    data_args = DataArguments(
        dataset=dataset,
        dataset_dir=str(dataset_dir),
        template=get_inline_template_name(template),
        cutoff_len=4096,
        overwrite_cache=overwrite_cache,
    )
    data_args.agentic_sft_mask_results = mask_results
    model_args = ModelArguments(model_name_or_path=str(tiny_model_dir), cache_dir=str(tmp_path / "cache"))
    training_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    template_obj = get_template_and_fix_tokenizer(tokenizer, data_args)
    module = get_dataset(template_obj, model_args, data_args, training_args, stage="sft", tokenizer=tokenizer)
    return module["train_dataset"], tokenizer


def test_hand_checked_loss_mask_positions(tmp_path, tiny_model_dir):
    """Tiny tokenizer, qwen: token positions read off by hand (see the table in the comments)."""
    row = {
        "system": "S",
        "conversations": [
            {"from": "human", "value": "Q?"},
            {"from": "gpt", "value": "<search> q </search> <result>\nR\n</result> <answer> A </answer>"},
        ],
    }
    name = _write_dataset(tmp_path / "d", [row])
    dataset, tokenizer = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen")
    ids, labels = dataset[0]["input_ids"], dataset[0]["labels"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    # 0-19  <|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n   masked
    # 20-27 "<" "search" ">" "Ġ" "q" "Ġ</" "search" ">"                                            trained
    # 28-36 "Ġ<" "result" ">" "Ċ" "R" "Ċ" "</" "result" ">"                                        masked
    # 37-45 "Ġ<" "answer" ">" "ĠA" "Ġ</" "answer" ">" "<|im_end|>" "Ċ"                             trained
    assert len(ids) == 46
    assert tokens[15:20] == ["<|im_start|>", "a", "ss", "istant", "Ċ"]
    assert tokens[20:28] == ["<", "search", ">", "Ġ", "q", "Ġ</", "search", ">"]
    assert tokens[28:37] == ["Ġ<", "result", ">", "Ċ", "R", "Ċ", "</", "result", ">"]
    assert tokens[37:46] == ["Ġ<", "answer", ">", "ĠA", "Ġ</", "answer", ">", "<|im_end|>", "Ċ"]
    masked = [pos for pos, label in enumerate(labels) if label == IGNORE]
    assert masked == list(range(0, 20)) + list(range(28, 37))
    assert [labels[pos] for pos in range(46) if pos not in masked] == [
        ids[pos] for pos in range(46) if pos not in masked
    ]


# trailing ids of the final assistant turn: end-of-turn (+ the newline qwen's template adds after it)
END_OF_TURN = {"qwen": ("<|im_end|>", "\n"), "qwen3": ("<|im_end|>", "\n"), "llama3": ("<|eot_id|>", "")}


@pytest.mark.parametrize("template", ["qwen", "qwen3", "llama3"])
@pytest.mark.parametrize("layout", ["inline", "turns"])
def test_sft_ids_equal_the_rl_view_chunk_by_chunk(tmp_path, tiny_model_dir, template, layout):
    """[RL prompt ids] + [each chunk encoded alone] with observation chunks masked == LLaMA-Factory's SFT row."""
    from datasets import Dataset
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    from llamafactory_agentic.data import encode_rl_prompts
    from llamafactory_agentic.data.tags import wrap_observation

    row = _inline_row() if layout == "inline" else _turns_row()
    name = _write_dataset(tmp_path / "d", [row])
    dataset, tokenizer = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", template)
    ids, labels = dataset[0]["input_ids"], dataset[0]["labels"]

    # RL view: the prompt rendered with the *base* template, as the RL stage does
    rl_tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    rl_template = get_template_and_fix_tokenizer(rl_tokenizer, DataArguments(template=template))
    prompts = Dataset.from_list(
        [{"_prompt": [{"role": "user", "content": QUESTION}], "_system": SYSTEM, "_tools": ""}]
    )
    prompt_ids = encode_rl_prompts(prompts, rl_template, rl_tokenizer, max_prompt_length=4096)[0]["prompt_ids"]

    expected_ids, expected_labels = list(prompt_ids), [IGNORE] * len(prompt_ids)
    for role, content in CHUNKS:
        if role == "observation":  # the rollout encodes the inserted string on its own
            chunk = rl_tokenizer.encode(wrap_observation(content), add_special_tokens=False)
            expected_labels += [IGNORE] * len(chunk)
        else:
            chunk = rl_tokenizer.encode(content, add_special_tokens=False)
            if role == "assistant":
                eot, tail = END_OF_TURN[template]
                chunk += [rl_tokenizer.convert_tokens_to_ids(eot)] + rl_tokenizer.encode(
                    tail, add_special_tokens=False
                )
            expected_labels += chunk
        expected_ids += chunk

    assert rl_tokenizer.decode(prompt_ids).endswith(
        "<|im_start|>assistant\n" if template != "llama3" else "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert ids == expected_ids
    assert labels == expected_labels


def test_both_layouts_and_the_demo_file_convert(tmp_path, tiny_model_dir):
    from llamafactory.data.loader import _load_single_dataset
    from llamafactory.data.parser import get_dataset_list
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import Seq2SeqTrainingArguments

    from llamafactory_agentic.integration.data_registration import register_data_extensions

    register_data_extensions()
    data_args = DataArguments(dataset="arpo_sft_demo", dataset_dir=str(REPO_DATA), overwrite_cache=True)
    model_args = ModelArguments(model_name_or_path="unused", cache_dir=str(tmp_path / "cache"))
    training_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    attr = get_dataset_list(["arpo_sft_demo"], str(REPO_DATA))[0]
    rows = _load_single_dataset(attr, model_args, data_args, training_args).to_list()
    roles = [[m["role"] for m in row["_prompt"] + row["_response"]] for row in rows]
    f, o = "function", "observation"
    assert roles == [
        ["user", f, o, "assistant"],  # inline, one python call
        ["user", f, o, f, o, "assistant"],  # inline, search then python
        ["user", "assistant"],  # no tool call
        ["user", f, o, f, o, "assistant"],  # function_call/observation layout
        ["user", f, o, "assistant"],  # same, observation given with <result> tags
        ["user", f, o, "assistant", "user", "assistant"],  # two questions
    ]
    assert rows[0]["_prompt"][2]["content"] == "385"
    assert rows[4]["_prompt"][2]["content"] == "610"  # <result>\n610\n</result> unwrapped
    assert rows[0]["_prompt"][1]["content"].endswith("</python>")
    assert all(row["_system"].startswith("You are a helpful assistant") for row in rows)


def test_mask_results_false_trains_on_results_inline(tmp_path, tiny_model_dir):
    name = _write_dataset(tmp_path / "d", [_turns_row()])
    dataset, tokenizer = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen", mask_results=False)
    ids, labels = dataset[0]["input_ids"], dataset[0]["labels"]
    trained = [label for label in labels if label != IGNORE]
    assert tokenizer.decode(trained) == INLINE + "<|im_end|>\n"
    first = labels.index(trained[0])
    assert all(label != IGNORE for label in labels[first:])  # nothing masked after the prompt
    assert tokenizer.decode(ids[first:]) == INLINE + "<|im_end|>\n"


def test_datasets_cache_follows_the_mask_results_switch(tmp_path, tiny_model_dir):
    """The converter's options live on data_args, which is part of the map fingerprint: no stale cache."""
    name = _write_dataset(tmp_path / "d", [_inline_row()])
    masked, _ = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen", mask_results=True, overwrite_cache=False)
    inline, _ = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen", mask_results=False, overwrite_cache=False)
    again, _ = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen", mask_results=True, overwrite_cache=False)
    assert masked[0]["input_ids"] == inline[0]["input_ids"] == again[0]["input_ids"]
    assert masked[0]["labels"] == again[0]["labels"] != inline[0]["labels"]
    assert masked[0]["labels"].count(IGNORE) > inline[0]["labels"].count(IGNORE)


def test_converter_drops_unbalanced_and_malformed_trajectories(tmp_path, tiny_model_dir):
    rows = [
        _inline_row(),
        _inline_row(INLINE.replace("</think>", "", 1)),  # unbalanced <think>
        _inline_row("<think> a </think> <result>\nx\n</result> <answer> 1 </answer>"),  # result after no call
        _inline_row(),
    ]
    name = _write_dataset(tmp_path / "d", rows)
    dataset, _ = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen")
    assert len(dataset) == 2


@pytest.mark.parametrize("mask_results", [True, False])
def test_tool_output_with_literal_tags_is_kept_in_the_turns_layout(tmp_path, tiny_model_dir, mask_results):
    """Issue 8 item 5: tag balance must ignore observation text (a page may quote `</result>` or `<answer>`)."""
    from llamafactory_agentic.train.agentic_sft.check import check_sft_datasets

    page = "Page 1: the markup ends with </result> and <answer> </think> <search> in the page"
    row = _turns_row()
    row["conversations"][2] = {"from": "observation", "value": page}
    name = _write_dataset(tmp_path / "d", [row, _turns_row()])
    dataset, tokenizer = _sft(tmp_path, tiny_model_dir, name, tmp_path / "d", "qwen", mask_results=mask_results)
    assert len(dataset) == 2
    ids, labels = dataset[0]["input_ids"], dataset[0]["labels"]
    observation = tokenizer.encode(" <result>\n" + page + "\n</result>", add_special_tokens=False)
    start = next(i for i in range(len(ids)) if ids[i : i + len(observation)] == observation)
    expected = [IGNORE] * len(observation) if mask_results else observation
    assert labels[start : start + len(observation)] == expected

    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import Seq2SeqTrainingArguments

    from llamafactory_agentic.data.inline_template import get_inline_template_name

    data_args = DataArguments(
        dataset=name, dataset_dir=str(tmp_path / "d"), template=get_inline_template_name("qwen"), overwrite_cache=True
    )
    data_args.agentic_sft_mask_results = mask_results
    model_args = ModelArguments(model_name_or_path=str(tiny_model_dir), cache_dir=str(tmp_path / "cache"))
    training_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    template = get_template_and_fix_tokenizer(tokenizer, data_args)
    report = check_sft_datasets(template, tokenizer, model_args, data_args, training_args)  # raises on a bad row
    assert report.rows == 2 and report.bad_rows == []


def test_inline_templates_are_registered_idempotently():
    from llamafactory.data.template import TEMPLATES, ReasoningTemplate, Template

    from llamafactory_agentic.data.inline_template import get_inline_template_name
    from llamafactory_agentic.integration.data_registration import register_data_extensions

    register_data_extensions()
    register_data_extensions()
    for base in ("qwen", "qwen3", "llama3"):
        name = get_inline_template_name(base)
        assert name == f"{base}_agentic"
        assert get_inline_template_name(name) == name
        template = TEMPLATES[name]
        assert template.format_function.apply(content="<search> q </search>", thought_words=("a", "b")) == [
            "<search> q </search>"
        ]
        assert template.format_observation.apply(content="42") == [" <result>\n42\n</result>"]
        assert template.format_user.slots == TEMPLATES[base].format_user.slots
        assert template.format_assistant.slots == TEMPLATES[base].format_assistant.slots
    assert isinstance(TEMPLATES["qwen3"], ReasoningTemplate)
    # a reasoning template stays one (LLaMA-Factory sets enable_thinking on it), but no empty <think> is injected
    # into tool-call chunks or responses: a trajectory carries its own <think> blocks

    from llamafactory_agentic.testing import build_tiny_tokenizer

    qwen3 = TEMPLATES["qwen3_agentic"]
    assert isinstance(qwen3, ReasoningTemplate) and type(qwen3).__name__ == "InlineReasoningTemplate"
    assert type(TEMPLATES["qwen_agentic"]).__name__ == "InlineTemplate" and isinstance(
        TEMPLATES["qwen_agentic"], Template
    )
    tokenizer = build_tiny_tokenizer(None, "qwen3")
    messages = [
        {"role": "user", "content": "q"},
        {"role": "function", "content": "<search> x </search>"},
        {"role": "observation", "content": "r"},
        {"role": "assistant", "content": " <answer> a </answer>"},
    ]
    pairs = qwen3.encode_multiturn(tokenizer, messages)
    assert tokenizer.decode(pairs[0][1]) == "<search> x </search>"
    assert tokenizer.decode(pairs[1][1]) == " <answer> a </answer><|im_end|>\n"
    assert tokenizer.decode(pairs[0][0]).endswith("<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="does not exist"):
        get_inline_template_name("no_such_template")
