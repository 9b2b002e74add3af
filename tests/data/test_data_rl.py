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

"""RL prompt data (`formatting: arpo_rl`) on ARPO-layout parquet files (synthetic, and the real ones where present)
and on hand-written variants."""

import json
import logging
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from llamafactory_agentic.common.log import get_logger


REPO_DATA = Path(__file__).resolve().parents[2] / "data"
SYSTEM = "Answer with tools. Put the final answer in \x08oxed{}."


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _args(tmp_path, dataset, dataset_dir, cache_dir, eval_dataset=None, **data_kwargs):
    from llamafactory.hparams import DataArguments, ModelArguments
    from transformers import Seq2SeqTrainingArguments

    data_args = DataArguments(dataset=dataset, eval_dataset=eval_dataset, dataset_dir=str(dataset_dir), **data_kwargs)
    model_args = ModelArguments(model_name_or_path="unused-by-the-loader", cache_dir=str(cache_dir))
    training_args = Seq2SeqTrainingArguments(output_dir=str(tmp_path / "out"), report_to="none")
    return model_args, data_args, training_args


def _load(tmp_path, dataset, dataset_dir, cache_dir, skip=False, repair=True, **data_kwargs):
    from llamafactory_agentic.data import load_rl_dataset

    model_args, data_args, training_args = _args(tmp_path, dataset, dataset_dir, cache_dir, **data_kwargs)
    finetuning_args = SimpleNamespace(agentic_skip_bad_rows=skip, agentic_repair_boxed=repair)
    records = _Records()
    logger = get_logger("llamafactory_agentic")
    logger.addHandler(records)
    try:
        module = load_rl_dataset(model_args, data_args, training_args, finetuning_args)
    finally:
        logger.removeHandler(records)
    return module, records.messages


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("hf-cache")


@pytest.fixture(scope="session")
def arpo_dataset_dir(tmp_path_factory, shared_data):
    """The repo's data/dataset_info.json next to an `arpo/` folder: the layout the README asks users for."""
    root = tmp_path_factory.mktemp("dataset-dir")
    shutil.copy(REPO_DATA / "dataset_info.json", root / "dataset_info.json")
    (root / "arpo").symlink_to(shared_data / "arpo", target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def real_rl(tmp_path_factory, arpo_dataset_dir, cache_dir):
    """All three files loaded once (train_10k with skipping: one row has a blank ground truth, the release's 5274)."""
    tmp = tmp_path_factory.mktemp("real-rl")
    loaded = {}
    for name, skip in (
        ("arpo_rl_reasoning_10k_local", True),
        ("arpo_rl_deepsearch_1k_local", False),
        ("arpo_rl_valid_local", False),
    ):
        module, messages = _load(tmp, name, arpo_dataset_dir, cache_dir, skip=skip)
        loaded[name] = (module["train_dataset"], messages)
    return loaded


def _raw_rows(shared_data, file_name):
    return pq.read_table(shared_data / "arpo" / "rl" / file_name).to_pylist()


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("arpo_rl_reasoning_10k_local", "train_10k"),
        ("arpo_rl_deepsearch_1k_local", "hard_search_1k"),
        ("arpo_rl_valid_local", "valid"),
    ],
)
def test_real_files_rows_repair_ground_truth_and_extra_columns(real_rl, shared_data, name, stem):
    # the release: 9999 (one blank row skipped), 1071 and 180 rows, two '\x08oxed' in every system prompt
    rows = shared_data.facts["rl_rows"][stem] - (stem in shared_data.facts["blank_truth_row"])
    file_name = f"{stem}.parquet"
    repair_line = f"[agentic-data] {stem}: repaired {2 * rows} '\\x08oxed' -> '\\boxed' in {rows}/{rows} rows"
    dataset, messages = real_rl[name]
    assert len(dataset) == rows
    assert [m for m in messages if "repaired" in m] == [repair_line]

    raw = [r for r in _raw_rows(shared_data, file_name) if r["reward_model"]["ground_truth"].strip()]
    assert len(raw) == rows
    converted = dataset.to_list()
    for got, want in zip(converted, raw):
        assert got["_ground_truth"] == want["reward_model"]["ground_truth"]
        assert got["_data_source"] == want["data_source"]
        assert got["_ability"] == (want["ability"] or "")
        assert got["_system"] == want["prompt"][0]["content"].replace("\x08oxed", "\\boxed")
        assert got["_prompt"] == [{"role": "user", "content": want["prompt"][1]["content"]}]
        assert got["_response"] == [] and got["_tools"] == "" and got["_images"] is None
        extra = json.loads(got["_extra"])
        assert extra["extra_info"] == want["extra_info"]
        assert "metadata" in extra and extra["metadata"] is None
        style = {k: v for k, v in want["reward_model"].items() if k != "ground_truth"}
        assert extra.get("reward_model", {}) == style

    assert not any("\x08" in row["_system"] for row in converted)
    assert all(row["_system"].count("\\boxed") == 2 for row in converted)


def test_real_files_metadata_counts(real_rl, shared_data):
    facts = shared_data.facts
    hard = real_rl["arpo_rl_deepsearch_1k_local"][0]
    assert Counter(hard["_data_source"]) == facts["hard_sources"]  # the release: 871 simpledeepsearch, 200 nan
    assert set(hard["_ability"]) == {""}  # ability is null in this file
    train = real_rl["arpo_rl_reasoning_10k_local"][0]
    assert Counter(train["_ability"]) == facts["abilities"]["train_10k"]  # the blank row (release: 5274) is math
    valid = real_rl["arpo_rl_valid_local"][0]
    assert Counter(valid["_ability"]) == facts["abilities"]["valid"]


def test_real_train_file_other_control_characters_are_warned_and_kept(real_rl, shared_data):
    dataset, messages = real_rl["arpo_rl_reasoning_10k_local"]
    facts = shared_data.facts
    rows = facts["rl_rows"]["train_10k"]
    assert f"[agentic-data] train_10k: skipped 1/{rows} malformed rows (agentic_skip_bad_rows)" in messages
    # the release: 34 other control characters (U+000B x1, U+000C x25, U+000D x8) in 28/9999 rows
    assert f"[agentic-data] train_10k: {facts['control_chars']}, left unchanged" in messages
    kept = sum(m["content"].count("\x0c") for row in dataset["_prompt"] for m in row)
    assert kept == facts["form_feeds"]


def test_real_train_file_bad_row_error_names_file_row_field_and_fix(
    tmp_path, arpo_dataset_dir, cache_dir, shared_data
):
    from llamafactory_agentic.data import RLDataError

    with pytest.raises(RLDataError) as info:
        _load(tmp_path, "arpo_rl_reasoning_10k_local", arpo_dataset_dir, cache_dir)
    row = shared_data.facts["blank_truth_row"]["train_10k"]  # the release: 5274
    assert str(info.value) == (
        f"train_10k.parquet row {row}: field reward_model.ground_truth is empty; fix the row or set "
        "agentic_skip_bad_rows: true"
    )


def test_repair_off_keeps_backspace_and_warns(tmp_path, arpo_dataset_dir, cache_dir, shared_data):
    module, messages = _load(tmp_path, "arpo_rl_valid_local", arpo_dataset_dir, cache_dir, repair=False)
    assert all(row["_system"].count("\x08oxed") == 2 for row in module["train_dataset"])
    rows = shared_data.facts["rl_rows"]["valid"]  # the release: 360 in 180/180
    assert any(f"{2 * rows} '\\x08oxed' in {rows}/{rows} rows left unrepaired" in m for m in messages)


def test_max_samples_val_size_and_eval_dataset(tmp_path, arpo_dataset_dir, cache_dir, shared_data):
    module, _ = _load(
        tmp_path,
        "arpo_rl_deepsearch_1k_local,arpo_rl_valid_local",
        arpo_dataset_dir,
        cache_dir,
        max_samples=50,
        val_size=0.2,
    )
    assert len(module["train_dataset"]) == 80 and len(module["eval_dataset"]) == 20
    module, _ = _load(
        tmp_path, "arpo_rl_deepsearch_1k_local", arpo_dataset_dir, cache_dir, eval_dataset="arpo_rl_valid_local"
    )
    rows = shared_data.facts["rl_rows"]  # the release: 1071 and 180
    assert len(module["train_dataset"]) == rows["hard_search_1k"] and len(module["eval_dataset"]) == rows["valid"]


def _write_info(root, entries):
    root.mkdir(parents=True, exist_ok=True)
    (root / "dataset_info.json").write_text(json.dumps(entries))


def test_string_column_export_loads_like_the_struct_columns(tmp_path, cache_dir, shared_data):
    """`valid.parquet` with prompt/reward_model/extra_info as JSON strings (another export) loads to the same rows."""
    from arpo_files import string_columns

    root = tmp_path / "variants"
    _write_info(
        root, {name: {"file_name": f"{name}.parquet", "formatting": "arpo_rl"} for name in ("structs", "strs")}
    )
    shutil.copy(shared_data / "arpo" / "rl" / "valid.parquet", root / "structs.parquet")
    rows = pq.read_table(root / "structs.parquet").to_pylist()
    pq.write_table(string_columns(rows), root / "strs.parquet")
    table = pq.read_table(root / "strs.parquet")
    assert all(pa.types.is_string(table.schema.field(c).type) for c in ("prompt", "reward_model", "extra_info"))
    structs, _ = _load(tmp_path, "structs", root, cache_dir)
    strings, messages = _load(tmp_path, "strs", root, cache_dir)
    drop = ("_source",)  # the file name
    assert [{k: v for k, v in r.items() if k not in drop} for r in strings["train_dataset"].to_list()] == [
        {k: v for k, v in r.items() if k not in drop} for r in structs["train_dataset"].to_list()
    ]
    assert any(f"strs: repaired {2 * len(rows)} " in m for m in messages)


def test_json_and_python_literal_string_columns(tmp_path, cache_dir):
    """Other exports store prompt/reward_model/extra_info as strings; lists of aliases and ints are ground truths."""
    prompts = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Who wrote Hamlet?"}],
        [{"role": "user", "content": "What is 6 * 7?"}],
        [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "First question?"},
            {"role": "assistant", "content": "First answer."},
            {"role": "user", "content": "Second question?"},
        ],
    ]
    table = pa.table(
        {
            "data_source": ["web", "math_src", None],
            "prompt": [json.dumps(prompts[0]), str(prompts[1]), json.dumps(prompts[2])],
            "ability": ["qa", "math", None],
            "reward_model": [
                str({"ground_truth": ["William Shakespeare", "Shakespeare"], "style": "rule"}),
                json.dumps({"ground_truth": 42}),
                str({"ground_truth": "2"}),
            ],
            "extra_info": [json.dumps({"index": 0, "split": "test"}), str({"index": 1, "split": "test"}), "None"],
            "metadata": ["None", "null", "{'level': 3}"],
            "difficulty": ["easy", "hard", "1"],
        }
    )
    root = tmp_path / "strings"
    _write_info(root, {"strings": {"file_name": "strings.parquet", "formatting": "arpo_rl"}})
    pq.write_table(table, root / "strings.parquet")
    module, messages = _load(tmp_path, "strings", root, cache_dir)
    rows = module["train_dataset"].to_list()
    assert [r["_ground_truth"] for r in rows] == ['["William Shakespeare", "Shakespeare"]', "42", "2"]
    assert json.loads(rows[0]["_ground_truth"]) == ["William Shakespeare", "Shakespeare"]
    assert [r["_system"] for r in rows] == [SYSTEM.replace("\x08oxed", "\\boxed"), "", SYSTEM.replace("\x08", "\\b")]
    assert rows[1]["_prompt"] == [{"role": "user", "content": "What is 6 * 7?"}]
    assert [m["role"] for m in rows[2]["_prompt"]] == ["user", "assistant", "user"]
    assert [r["_data_source"] for r in rows] == ["web", "math_src", ""]
    assert [r["_ability"] for r in rows] == ["qa", "math", ""]
    extras = [json.loads(r["_extra"]) for r in rows]
    assert extras[0] == {
        "extra_info": {"index": 0, "split": "test"},
        "metadata": None,
        "difficulty": "easy",
        "reward_model": {"style": "rule"},
    }
    assert extras[1] == {"extra_info": {"index": 1, "split": "test"}, "metadata": None, "difficulty": "hard"}
    assert extras[2] == {"extra_info": None, "metadata": {"level": 3}, "difficulty": "1"}
    assert "[agentic-data] strings: repaired 2 '\\x08oxed' -> '\\boxed' in 2/3 rows" in messages


def test_prompt_column_can_be_renamed(tmp_path, cache_dir):
    root = tmp_path / "renamed"
    _write_info(root, {"renamed": {"file_name": "r.jsonl", "formatting": "arpo_rl", "columns": {"prompt": "chat"}}})
    row = {"chat": [{"role": "user", "content": "Q?"}], "reward_model": {"ground_truth": "A"}}
    (root / "r.jsonl").write_text(json.dumps(row) + "\n")
    module, _ = _load(tmp_path, "renamed", root, cache_dir)
    assert module["train_dataset"][0]["_prompt"] == [{"role": "user", "content": "Q?"}]
    assert json.loads(module["train_dataset"][0]["_extra"]) == {}


GOOD_PROMPT = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Q?"}]
BAD_ROWS = [
    ("prompt_missing", {"prompt": None}, "field prompt is missing"),
    ("prompt_empty", {"prompt": []}, "field prompt is empty"),
    ("no_user", {"prompt": [{"role": "system", "content": SYSTEM}]}, "field prompt has no user message"),
    ("empty_question", {"prompt": [{"role": "user", "content": "  "}]}, "field prompt[0].content is empty"),
    ("bad_role", {"prompt": [{"role": "tool", "content": "x"}]}, "field prompt[0].role is 'tool'"),
    ("not_a_message", {"prompt": ["hello"]}, "field prompt[0] must be a {role, content} dict, got str"),
    ("prompt_type", {"prompt": 12}, "field prompt must be a list of {role, content} messages, got int"),
    ("gt_empty", {"reward_model": {"ground_truth": ""}}, "field reward_model.ground_truth is empty"),
    ("gt_missing", {"reward_model": {"style": "rule"}}, "field reward_model.ground_truth is missing"),
    ("gt_type", {"reward_model": {"ground_truth": {"a": 1}}}, "field reward_model.ground_truth must be a string"),
    ("rm_type", {"reward_model": [1, 2]}, "field reward_model must be a {ground_truth, style} dict, got list"),
    ("gt_nan", {"reward_model": {"ground_truth": float("nan")}}, "field reward_model.ground_truth is NaN"),
    ("gt_inf", {"reward_model": {"ground_truth": ["a", float("-inf")]}}, "field reward_model.ground_truth[1] is -inf"),
    ("ability_type", {"ability": 3}, "field ability must be a string or null, got int"),
]


def _row(**override):
    row = {"data_source": "src", "prompt": GOOD_PROMPT, "ability": None, "reward_model": {"ground_truth": "A"}}
    row.update(override)
    # prompt and reward_model as JSON strings, so that rows of different shapes fit one file (an accepted export
    # variant); ability stays native (null in the good rows, so that an int in a bad row still loads)
    return {key: json.dumps(value) if key in ("prompt", "reward_model") else value for key, value in row.items()}


@pytest.mark.parametrize(("case", "override", "problem"), BAD_ROWS, ids=[case for case, _, _ in BAD_ROWS])
def test_bad_row_error_names_file_row_field_and_fix(tmp_path, cache_dir, case, override, problem):
    from llamafactory_agentic.data import RLDataError

    root = tmp_path / case
    _write_info(root, {case: {"file_name": f"{case}.jsonl", "formatting": "arpo_rl"}})
    rows = [_row(), _row(), _row(**override)]
    (root / f"{case}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(RLDataError) as info:
        _load(tmp_path, case, root, cache_dir)
    message = str(info.value)
    assert message.startswith(f"{case}.jsonl row 2: {problem}")
    assert message.endswith("; fix the row or set agentic_skip_bad_rows: true")


def test_skip_bad_rows_counts_and_keeps_the_good_ones(tmp_path, cache_dir):
    from llamafactory_agentic.data import RLDataError

    root = tmp_path / "mixed"
    _write_info(root, {"mixed": {"file_name": "mixed.jsonl", "formatting": "arpo_rl"}})
    rows = []
    for idx, (_, override, _) in enumerate(BAD_ROWS):
        rows.append(_row(reward_model={"ground_truth": f"good-{idx}"}))
        rows.append(_row(**override))
    (root / "mixed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    with pytest.raises(RLDataError, match=r"mixed\.jsonl row 1: field prompt is missing; .* \(13 more malformed rows"):
        _load(tmp_path, "mixed", root, cache_dir)

    module, messages = _load(tmp_path, "mixed", root, cache_dir, skip=True)
    assert module["train_dataset"]["_ground_truth"] == [f"good-{idx}" for idx in range(len(BAD_ROWS))]
    assert (
        f"[agentic-data] mixed: skipped {len(BAD_ROWS)}/{2 * len(BAD_ROWS)} malformed rows (agentic_skip_bad_rows)"
        in messages
    )


def test_non_rl_formatting_and_streaming_are_refused(tmp_path, cache_dir):
    from llamafactory_agentic.data import RLDataError

    root = tmp_path / "sharegpt"
    _write_info(root, {"sg": {"file_name": "sg.jsonl", "formatting": "sharegpt"}})
    (root / "sg.jsonl").write_text(json.dumps({"conversations": [{"from": "human", "value": "hi"}]}) + "\n")
    with pytest.raises(RLDataError, match="need `formatting: arpo_rl`"):
        _load(tmp_path, "sg", root, cache_dir)
    with pytest.raises(ValueError, match="streaming"):
        _load(tmp_path, "sg", root, cache_dir, streaming=True)


def test_converter_registration_is_idempotent():
    from llamafactory.data.converter import DATASET_CONVERTERS

    from llamafactory_agentic.data import ArpoRLDatasetConverter, ArpoSFTDatasetConverter
    from llamafactory_agentic.integration.data_registration import register_data_extensions

    register_data_extensions()
    register_data_extensions()
    assert DATASET_CONVERTERS["arpo_rl"] is ArpoRLDatasetConverter
    assert DATASET_CONVERTERS["arpo_sft"] is ArpoSFTDatasetConverter


def test_encode_rl_prompts_renders_with_the_template(tmp_path, cache_dir, tiny_model_dir):
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    from llamafactory_agentic.data import encode_rl_prompts

    root = tmp_path / "enc"
    _write_info(root, {"enc": {"file_name": "enc.jsonl", "formatting": "arpo_rl"}})
    rows = [
        {
            "prompt": [{"role": "system", "content": "Use <search> tools."}, {"role": "user", "content": "Q one?"}],
            "reward_model": {"ground_truth": "a"},
        },
        {
            "prompt": [{"role": "system", "content": "Use <search> tools."}, {"role": "user", "content": "Q two?"}],
            "reward_model": {"ground_truth": "b"},
        },
    ]
    (root / "enc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dataset = _load(tmp_path, "enc", root, cache_dir)[0]["train_dataset"]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template="qwen"))

    encoded = encode_rl_prompts(dataset, template, tokenizer, max_prompt_length=1000)
    for ids, question in zip(encoded["prompt_ids"], ["Q one?", "Q two?"]):
        assert tokenizer.decode(ids) == (
            f"<|im_start|>system\nUse <search> tools.<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        header = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
        assert ids[-len(header) :] == header
    assert encoded["_source"] == ["enc.jsonl", "enc.jsonl"] and encoded["_row"] == [0, 1]


def test_overlong_prompts_are_skipped_by_name_or_stop_the_run(tmp_path, cache_dir, tiny_model_dir):
    """Issue 8 item 4: an over-long prompt was cut from the left, losing the system prompt, with only a count."""
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoTokenizer

    from llamafactory_agentic.data import RLDataError, encode_rl_prompts

    system = "Use <search> tools."
    long_system = system + " Think step by step." * 40

    def row(content, truth, sys_prompt=system):
        messages = [{"role": "system", "content": sys_prompt}, {"role": "user", "content": content}]
        return {"prompt": messages, "reward_model": {"ground_truth": truth}}

    # row 0 is malformed (skipped on load), rows 2 and 4 are too long: row numbers must still be the file's
    rows = [row("Q?", ""), row("Q one?", "a"), row("Q two?", "b", long_system), row("Q three?", "c")]
    rows.append(row("Q four?" * 60, "d"))
    root = tmp_path / "long"
    _write_info(root, {"long": {"file_name": "long.jsonl", "formatting": "arpo_rl"}})
    (root / "long.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    dataset = _load(tmp_path, "long", root, cache_dir, skip=True)[0]["train_dataset"]
    assert dataset["_row"] == [1, 2, 3, 4]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template="qwen"))
    lengths = [len(ids) for ids in encode_rl_prompts(dataset, template, tokenizer, 100_000)["prompt_ids"]]
    limit = max(lengths[0], lengths[2]) + 1
    assert lengths[1] > limit and lengths[3] > limit

    records = _Records()
    get_logger("llamafactory_agentic").addHandler(records)
    try:
        kept = encode_rl_prompts(dataset, template, tokenizer, max_prompt_length=limit)  # default: skip
    finally:
        get_logger("llamafactory_agentic").removeHandler(records)
    assert kept["_ground_truth"] == ["a", "c"]
    for ids in kept["prompt_ids"]:  # nothing is cut: every kept prompt still starts with its system prompt
        assert tokenizer.decode(ids).startswith(f"<|im_start|>system\n{system}<|im_end|>")
    assert (
        f"[agentic-data] skipped 2/4 prompts longer than arpo_max_prompt_length={limit} tokens "
        f"(longest {max(lengths)}): long.jsonl row 2 ({lengths[1]} tokens), long.jsonl row 4 ({lengths[3]} tokens); "
        "raise arpo_max_prompt_length to keep them, or set arpo_overlong_prompt: error to stop instead"
    ) in records.messages

    with pytest.raises(RLDataError) as info:
        encode_rl_prompts(dataset, template, tokenizer, max_prompt_length=limit, overlong="error")
    assert str(info.value) == (
        f"long.jsonl row 2: the prompt is {lengths[1]} tokens, longer than arpo_max_prompt_length={limit} (1 more "
        "such prompt: long.jsonl row 4); raise arpo_max_prompt_length, shorten the prompt, or set "
        "arpo_overlong_prompt: skip to drop such rows"
    )
    with pytest.raises(RLDataError, match="every prompt is longer than arpo_max_prompt_length=5"):
        encode_rl_prompts(dataset, template, tokenizer, max_prompt_length=5)
    with pytest.raises(ValueError, match="arpo_overlong_prompt must be skip or error"):
        encode_rl_prompts(dataset, template, tokenizer, max_prompt_length=limit, overlong="truncate")


def test_numeric_ground_truths_are_stored_in_canonical_form(tmp_path, cache_dir):
    """Issue 8 item 3: a float column stored 10.0 as "10.0" (F1 then matched "100" and not "10"); NaN was "nan"."""
    from llamafactory_agentic.data import RLDataError
    from llamafactory_agentic.rewards import get_reward_function

    prompt = [{"role": "user", "content": "How many?"}]
    truths = [10.0, 10.5, 1000.0, 7.0, 0.1 + 0.2, 1e-7]
    table = pa.table({"prompt": [prompt] * len(truths), "reward_model": [{"ground_truth": t} for t in truths]})
    assert table.schema.field("reward_model").type.field("ground_truth").type == pa.float64()
    root = tmp_path / "floats"
    _write_info(root, {"floats": {"file_name": "floats.parquet", "formatting": "arpo_rl"}})
    pq.write_table(table, root / "floats.parquet")
    stored = _load(tmp_path, "floats", root, cache_dir)[0]["train_dataset"]["_ground_truth"]
    assert stored == ["10", "10.5", "1000", "7", "0.30000000000000004", "0.0000001"]
    reward = get_reward_function("f1")
    answer = "<think> x </think><answer> \\boxed{%s} </answer>"
    assert reward(answer % "10", stored[0], {}) == 1.0 and reward(answer % "100", stored[0], {}) == 0.0

    aliases = pa.table({"prompt": [prompt], "reward_model": [{"ground_truth": [10.0, 2.5]}]})
    root = tmp_path / "aliases"
    _write_info(root, {"aliases": {"file_name": "aliases.parquet", "formatting": "arpo_rl"}})
    pq.write_table(aliases, root / "aliases.parquet")
    assert _load(tmp_path, "aliases", root, cache_dir)[0]["train_dataset"]["_ground_truth"] == ['["10", "2.5"]']

    bad = pa.table(
        {"prompt": [prompt] * 3, "reward_model": [{"ground_truth": t} for t in (1.0, float("nan"), float("inf"))]}
    )
    root = tmp_path / "nan"
    _write_info(root, {"nan": {"file_name": "nan.parquet", "formatting": "arpo_rl"}})
    pq.write_table(bad, root / "nan.parquet")
    with pytest.raises(RLDataError) as info:
        _load(tmp_path, "nan", root, cache_dir)
    assert str(info.value).startswith("nan.parquet row 1: field reward_model.ground_truth is NaN")
    assert "(1 more malformed rows: 2)" in str(info.value)
    module, messages = _load(tmp_path, "nan", root, cache_dir, skip=True)
    assert module["train_dataset"]["_ground_truth"] == ["1"]
    assert "[agentic-data] nan: skipped 2/3 malformed rows (agentic_skip_bad_rows)" in messages


@pytest.mark.parametrize("content", ["", "\n\n"], ids=["no bytes", "blank lines"])
def test_an_empty_dataset_file_is_named(tmp_path, cache_dir, content):
    # issue 34 low: a 0-row file gave datasets' DatasetGenerationError (from pyarrow) naming no file
    from llamafactory_agentic.data import RLDataError

    root = tmp_path / "data"
    _write_info(root, {"rl": {"file_name": "rl.jsonl", "formatting": "arpo_rl"}})
    (root / "rl.jsonl").write_text(content)
    with pytest.raises(RLDataError, match=r"rl\.jsonl is empty \(0 rows\): write the `arpo_rl` rows") as info:
        _load(tmp_path, "rl", root, cache_dir)
    assert str(root / "rl.jsonl") in str(info.value)


def test_a_parquet_file_with_no_rows_is_named(tmp_path, cache_dir):
    from llamafactory_agentic.data import RLDataError

    root = tmp_path / "data"
    _write_info(root, {"rl": {"file_name": "rl.parquet", "formatting": "arpo_rl"}})
    pq.write_table(pa.table({"prompt": pa.array([], pa.string()), "data_source": pa.array([], pa.string())}),
                   root / "rl.parquet")  # fmt: skip
    with pytest.raises(RLDataError, match=r"rl\.parquet.*0 rows"):
        _load(tmp_path, "rl", root, cache_dir)
