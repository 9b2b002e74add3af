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

"""SFT ids = RL ids of native tool calls for every LLaMA-Factory template with a tool format (issue 37 item 2).

Templates: every entry of LLaMA-Factory's `TEMPLATES` whose `format_function` is a `FunctionFormatter` (its
`tool_utils` read and write JSON or XML calls). Cases: function turns with one call, with several calls, with a thought
before the call, and (reasoning templates) with thoughts and `enable_thinking: false` (LLaMA-Factory strips them).

SFT side: the template's `encode_multiturn` (what LLaMA-Factory's supervised processor encodes; the multimodal plugin
passes text-only rows through unchanged) with its label rule. RL side: the prompt from `encode_rl_prompts`, then the
real `AgenticRollout` with the template's `NativeToolFormat`: the scripted engine returns, turn by turn, the SFT target
ids up to their EOS token (what a policy trained on that row samples), the rollout extracts and runs the calls and
inserts the tool message itself. Ids must be equal (labels too, apart from what the template writes after a function
turn's EOS, which SFT trains and the rollout inserts); where `template_parity_issues` names a reason the test asserts
that they indeed differ, and the table in docs/tools.md ("Templates and parity") must equal the one computed here
(`python tests/sft/test_native_template_parity.py` rewrites it).

Tokenizers: one tiny byte-level BPE tokenizer (`testing.build_tiny_tokenizer`) plus, per template, the markers its slots
use as special tokens (`<|im_end|>`, `[INST]`, `<start_of_turn>`, ...); its EOS is the template's first stop word, else
the special token that ends an assistant turn, else `</s>`, as the families' tokenizers have it. Tool tags
(`<tool_call>`, `<think>`) stay ordinary text as in Qwen2.5's tokenizer.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from llamafactory_agentic.rollout import AgenticRollout, GenerationEngine, GenerationResult
from llamafactory_agentic.train.arpo.config import default_rollout_config


IGNORE = -100
DOCS = Path(__file__).resolve().parents[2] / "docs" / "tools.md"
START, END = "<!-- native-parity-table:start -->", "<!-- native-parity-table:end -->"
SYSTEM = "Answer with tools."
QUESTION = "How old was the college in 2024?"
OBSERVATIONS = ["Page 1: Balliol College was founded in 1263.", "Oxford", "761"]  # special-token text: §2.7
SPECIAL = re.compile(
    r"<\|[^<>\s]*?\|>|<｜[^<>\s]*?｜>|<\|[a-z_]+>|<[a-z_]+\|>|\[/?[A-Z_]+\]|<(?:start|end)_of_turn>|<_[a-z]+>|<eod>|<sep>"
    r"|<(?:beginning|end)_of_sentence>|\]~b\]|\[e~\[|</?role>"
)
COLUMNS = ("one call", "several calls", "thought", "thinking off")
CODES = {  # reason of `template_parity_issues` -> short code of the table
    "efficient_eos": "E",
    "does not end with the tokenizer's EOS": "N",
    "cannot render": "R",
    "does not read back": "X",
}
RESULTS: dict[str, dict[str, str]] = {}  # template -> column -> "yes" / code / "n/a", filled by the parity test


def _tool_templates():
    from llamafactory.data.formatter import FunctionFormatter
    from llamafactory.data.template import TEMPLATES

    return [name for name, t in TEMPLATES.items() if isinstance(t.format_function, FunctionFormatter)]


def _is_reasoning(name):
    from llamafactory.data.template import TEMPLATES, ReasoningTemplate

    return isinstance(TEMPLATES[name], ReasoningTemplate)


@pytest.fixture(scope="module")
def base_tokenizer_dir(tmp_path_factory):
    from llamafactory_agentic.testing import build_tiny_tokenizer

    root = tmp_path_factory.mktemp("tokenizer")
    build_tiny_tokenizer(root, "qwen")
    return root


_BASE = {}


def _tokenizer(base_dir, name):
    """A fresh copy (`get_template_and_fix_tokenizer` changes it) of the tiny tokenizer with the template's markers."""
    import copy

    if (base_dir, name) not in _BASE:
        _BASE[(base_dir, name)] = _build_tokenizer(base_dir, name)
    return copy.deepcopy(_BASE[(base_dir, name)])


def _build_tokenizer(base_dir, name):
    from llamafactory.data.template import TEMPLATES
    from transformers import AutoTokenizer

    t = TEMPLATES[name]
    markers = set(t.stop_words)
    for formatter in (t.format_user, t.format_assistant, t.format_system, t.format_function, t.format_observation):
        for slot in getattr(formatter, "slots", None) or []:
            if isinstance(slot, str):
                markers |= set(SPECIAL.findall(slot))
            elif isinstance(slot, dict):
                markers |= set(slot.values())
    eos = t.stop_words[0] if t.stop_words else None
    if eos is None:
        after = "".join(x for x in t.format_assistant.slots if isinstance(x, str)).split("{{content}}", 1)[-1].strip()
        match = SPECIAL.match(after) if after else None
        eos = match.group(0) if match else "</s>"
    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    tokenizer.add_special_tokens({"eos_token": eos})
    tokenizer.add_tokens(sorted(markers - {""}), special_tokens=True)
    return tokenizer


def _messages(case, thought_words):
    several = case in ("several calls", "thinking off")
    thoughts = case in ("thought", "thinking off")
    first = [{"name": "search", "arguments": {"query": "Balliol College founded"}}]
    if several:
        first.append({"name": "search", "arguments": {"query": "Balliol College city"}})
    second = [{"name": "python", "arguments": {"code": "print(2024 - 1263)"}}]

    def function(calls, thought):
        body = json.dumps(calls if len(calls) > 1 else calls[0])
        return thought_words[0] + thought + thought_words[1] + body if thoughts else body

    answer = (thought_words[0] + "Done." + thought_words[1] if thoughts else "") + "The answer is 761."
    results = [OBSERVATIONS[0], OBSERVATIONS[1]] if several else [OBSERVATIONS[0]]
    return [("function", function(first, "I need the year.")), ("observation", results),
            ("function", function(second, "Subtract.")), ("observation", [OBSERVATIONS[2]]), ("assistant", answer)]  # fmt: skip


class TargetEngine(GenerationEngine):
    """Returns the SFT target ids of each model turn, up to and including its EOS (a policy trained on the row)."""

    def __init__(self, turns, eos):
        self.turns, self.eos = list(turns), eos

    def generate(self, requests, sampling):
        return [GenerationResult(token_ids=self.turns.pop(0) + [self.eos], finish_reason="eos")]


class Results:
    """Tool executor answering each call with the next tool output."""

    def __init__(self, texts):
        self.texts = list(texts)

    def execute(self, calls):
        return [SimpleNamespace(text=self.texts.pop(0), status="ok", latency_s=0.0, cached=False) for _ in calls]


def _parity(base_dir, name, case):
    """None if SFT ids and labels equal the rollout's, else what differs."""
    from datasets import Dataset
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    from llamafactory_agentic.data import encode_rl_prompts
    from llamafactory_agentic.rollout.tool_format import build_tool_format

    tokenizer = _tokenizer(base_dir, name)
    template = get_template_and_fix_tokenizer(
        tokenizer, DataArguments(template=name, enable_thinking=case != "thinking off")
    )
    fmt = build_tool_format("template", None, template, tokenizer)
    messages = [{"role": "user", "content": QUESTION}]
    results = []
    for role, content in _messages(case, template.thought_words):
        if role == "observation":  # a turn's results: one observation message (docs/tools.md)
            messages.append({"role": role, "content": fmt.join_results(content)})
            results += content
        else:
            messages.append({"role": role, "content": content})
    try:
        pairs = template.encode_multiturn(tokenizer, [dict(m) for m in messages], SYSTEM, "")
    except Exception as exc:  # noqa: BLE001
        return f"LLaMA-Factory cannot encode the row: {exc}"
    eos = tokenizer.eos_token_id
    sft_ids = [i for source, target in pairs for i in source + target]
    sft_labels = []
    for k, (source, target) in enumerate(pairs):  # LLaMA-Factory's supervised processor's rule
        first = [eos] if template.efficient_eos and k else [IGNORE]
        sft_labels += (first + [IGNORE] * (len(source) - 1) if source else []) + target
    turns = []
    for _, target in pairs:
        if eos not in target:
            return "a model turn has no EOS token"
        turns.append(target[: len(target) - target[::-1].index(eos) - 1])
    prompts = Dataset.from_list([{"_prompt": messages[:1], "_system": SYSTEM, "_tools": ""}])
    prompt_ids = encode_rl_prompts(prompts, template, tokenizer, max_prompt_length=8192)[0]["prompt_ids"]
    config = default_rollout_config(
        group_size=1, initial_rollouts=1, eos_token_id=eos, max_response_length=8192, max_tool_calls=8
    )
    rollout = AgenticRollout(TargetEngine(turns, eos), Results(results), tokenizer, config, tool_format=fmt)
    traj = rollout.rollout([prompt_ids]).groups[0][0]
    if traj.num_tool_calls != len(results) or len(traj.tool_calls) != len(results):
        return f"the rollout ran {traj.num_tool_calls} of {len(results)} calls"
    rl_ids = list(prompt_ids) + traj.response_ids
    if sft_ids[: len(rl_ids)] != rl_ids:
        return "ids differ"
    tail = sft_ids[len(rl_ids) :]  # what the template writes after the final EOS (Qwen's "\n")
    mask = list(traj.loss_mask)
    turn_tail = len(tokenizer.encode(fmt.turn_tail, add_special_tokens=False)) if fmt.turn_tail else 0
    for call in traj.tool_calls:
        if call.obs_tokens:  # the first call of a turn holds its tool message
            mask[call.pos : call.pos + turn_tail] = [1] * turn_tail
    rl_labels = [IGNORE] * len(prompt_ids) + [t if m else IGNORE for t, m in zip(traj.response_ids, mask)]
    if sft_labels != rl_labels + tail:
        return "labels differ"
    return None


def _predicted(base_dir, name, case):
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    from llamafactory_agentic.rollout.tool_format import template_parity_issues

    tokenizer = _tokenizer(base_dir, name)
    template = get_template_and_fix_tokenizer(
        tokenizer, DataArguments(template=name, enable_thinking=case != "thinking off")
    )
    issues = template_parity_issues(template, tokenizer)
    probes = ("several calls", "thought") if case == "thinking off" else (case,)
    return [issues[p] for p in probes if p in issues]


def _code(reasons):
    return "".join(sorted({code for key, code in CODES.items() for r in reasons if key in r}))


def _row(base_dir, name):
    row = {}
    for case in COLUMNS:
        if case == "thinking off" and not _is_reasoning(name):
            row[case] = "n/a"
            continue
        reasons = _predicted(base_dir, name, case)
        difference = _parity(base_dir, name, case)
        if reasons:  # a known difference: it must show
            assert difference is not None, f"{name} / {case}: predicted {reasons} but SFT ids = RL ids"
            row[case] = _code(reasons)
            assert row[case], reasons
        else:
            assert difference is None, f"{name} / {case}: {difference}"
            row[case] = "yes"
    return row


@pytest.mark.parametrize("name", _tool_templates())
def test_native_sft_ids_equal_rl_ids_or_the_difference_is_known(base_tokenizer_dir, name):
    RESULTS[name] = _row(base_tokenizer_dir, name)


def table(rows):
    """The markdown table of docs/tools.md: templates with the same results share a row."""
    groups: dict[tuple, list[str]] = {}
    for name, row in rows.items():
        groups.setdefault(tuple(row[c] for c in COLUMNS), []).append(name)
    lines = ["| templates | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    order = sorted(groups.items(), key=lambda kv: (sum(v != "yes" for v in kv[0]), kv[1][0]))
    for values, names in order:
        lines.append("| " + ", ".join(f"`{n}`" for n in names) + " | " + " | ".join(values) + " |")
    return "\n".join(lines)


def _docs_table():
    text = DOCS.read_text()
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_docs_table_is_the_computed_one(base_tokenizer_dir):
    rows = {name: RESULTS.get(name) or _row(base_tokenizer_dir, name) for name in _tool_templates()}
    assert _docs_table() == table(rows), "run `python tests/sft/test_native_template_parity.py` to rewrite it"


def test_the_run_warns_for_a_template_with_a_known_difference(base_tokenizer_dir, plugin_caplog):
    import logging

    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    from llamafactory_agentic.rollout.tool_format import build_tool_format

    for name, expected in (("glm4", True), ("qwen", False)):
        tokenizer = _tokenizer(base_tokenizer_dir, name)
        template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template=name))
        plugin_caplog.clear()
        with plugin_caplog.at_level(logging.WARNING):
            build_tool_format("template", None, template, tokenizer)  # as an RL run and the evaluation build it
        warned = [r.getMessage() for r in plugin_caplog.records if "SFT ids cannot equal RL ids" in r.getMessage()]
        assert bool(warned) == expected, (name, warned)
    assert any("efficient_eos" in w for w in warned) or expected is False


def test_agentic_sft_with_such_a_template_warns_at_its_start(tmp_path, tiny_model_dir, plugin_caplog):
    import llamafactory_agentic

    llamafactory_agentic.register()
    from llamafactory.train.tuner import run_exp

    data = tmp_path / "data"
    data.mkdir()
    info = {"traj": {"file_name": "traj.jsonl", "formatting": "arpo_sft", "columns": {"messages": "conversations"}}}
    (data / "dataset_info.json").write_text(json.dumps(info))
    call = json.dumps({"name": "search", "arguments": {"query": "Balliol College founded"}})
    turns = [("human", QUESTION), ("function_call", call), ("observation", OBSERVATIONS[0]), ("gpt", "761")]
    row = {"conversations": [{"from": role, "value": value} for role, value in turns]}
    (data / "traj.jsonl").write_text(json.dumps(row) + "\n")
    run_exp(
        args={
            "model_name_or_path": str(tiny_model_dir),
            "stage": "agentic_sft",
            "do_train": False,
            "finetuning_type": "full",
            "dataset": "traj",
            "dataset_dir": str(data),
            "template": "glm4",
            "cutoff_len": 1024,
            "overwrite_cache": True,
            "output_dir": str(tmp_path / "saves"),
            "report_to": "none",
            "use_cpu": True,
            "cache_dir": str(tmp_path / "cache"),
            "agentic_tool_protocol": "template",
            "agentic_sft_check": False,
        }
    )
    warned = [r.getMessage() for r in plugin_caplog.records if "SFT ids cannot equal RL ids" in r.getMessage()]
    assert warned and all(w.startswith("[agentic-sft]") for w in warned), warned
    assert any("efficient_eos" in w for w in warned) and any("several calls" in w for w in warned)


if __name__ == "__main__":  # rewrite the table in docs/tools.md
    import tempfile

    from llamafactory_agentic.testing import build_tiny_tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        build_tiny_tokenizer(tmp, "qwen")
        computed = table({name: _row(Path(tmp), name) for name in _tool_templates()})
    text = DOCS.read_text()
    head, rest = text.split(START, 1)
    DOCS.write_text(head + START + "\n" + computed + "\n" + END + rest.split(END, 1)[1])
    print(computed)
