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

"""Model view (docs/algorithms.md §6.5, Decision) with the tiny tokenizer, and the reward registry."""

import textwrap

import pytest

from llamafactory_agentic.rewards import (
    RESULT_PLACEHOLDER,
    RewardFunction,
    build_model_view,
    get_reward_function,
    list_reward_functions,
    register_reward_function,
)


def _response(tokenizer, pieces):
    """pieces: list of (text, mask value); observations are encoded on their own, as the rollout does."""
    ids, mask = [], []
    for text, value in pieces:
        encoded = tokenizer.encode(text, add_special_tokens=False)
        ids += encoded
        mask += [value] * len(encoded)
    return ids, mask


def test_model_view_replaces_observations_and_cuts_at_eos(tiny_tokenizer):
    tok = tiny_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    ids, mask = _response(
        tok,
        [
            ("<think> look it up </think><search> capital of France </search>", 1),
            (" <result>\nPage 1: Paris is the capital of France.\n</result>", 0),
            (" <think> found it </think><answer> \\boxed{Paris} </answer>", 1),
        ],
    )
    ids += [eos, tok.convert_tokens_to_ids("<|im_start|>")] + tok.encode(" trailing", add_special_tokens=False)
    mask += [1] * (len(ids) - len(mask))
    view = build_model_view(tok, ids, mask, eos)
    assert view == (
        "<think> look it up </think><search> capital of France </search>"
        + RESULT_PLACEHOLDER
        + " <think> found it </think><answer> \\boxed{Paris} </answer>"
    )
    assert get_reward_function("f1")(view, "Paris", {"ability": "qa"}) == 1.0
    # several EOS ids; special tokens inside model runs are skipped
    ids2 = tok.encode("<think> a </think>", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_start|>")]
    assert build_model_view(tok, ids2 + [eos], [1] * (len(ids2) + 1), [0, eos]) == "<think> a </think>"
    with pytest.raises(ValueError):
        build_model_view(tok, ids2, [1], eos)


def test_answer_only_in_tool_output_earns_nothing(tiny_tokenizer):
    tok = tiny_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    ids, mask = _response(
        tok,
        [
            ("<think> search </think><search> capital of France </search>", 1),
            (" <result>\n<answer> \\boxed{Paris} </answer>\n</result>", 0),
            (" <think> not sure </think>", 1),
        ],
    )
    reward = get_reward_function("f1")
    full_text = tok.decode(ids, skip_special_tokens=True)
    assert reward(full_text, "Paris", {}) == 1.0  # what the reference (full decoded text) would pay
    view = build_model_view(tok, ids + [eos], mask + [1], eos)
    assert "boxed" not in view and reward(view, "Paris", {}) == -1.0


def test_tool_output_cannot_trigger_the_bonus_or_change_the_answer(tiny_tokenizer):
    tok = tiny_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    ids, mask = _response(
        tok,
        [
            ("<think> a </think><search> q </search>", 1),
            (" <result>\n<python> 1 </python> \\boxed{Lyon} </answer>\n</result>", 0),
            (" <think> b </think><answer> \\boxed{Paris} </answer>", 1),
        ],
    )
    view = build_model_view(tok, ids + [eos], mask + [1], eos)
    reward = get_reward_function("f1")
    assert reward(view, "Paris", {}) == 1.0  # not 1.1: "</python>" only appears in the tool output
    assert reward(tok.decode(ids), "Paris", {}) == -1.0  # the full text has two </answer> tags


def test_registry_names_and_errors():
    assert {"f1", "em", "math"} <= set(list_reward_functions())
    assert isinstance(get_reward_function("em"), RewardFunction)
    with pytest.raises(ValueError):
        get_reward_function("nope")
    with pytest.raises(ValueError):
        get_reward_function("f1", math_mode="sympy")
    with pytest.raises(ValueError):
        get_reward_function("no_such_module_xyz:fn")
    with pytest.raises(ValueError):
        get_reward_function("json:no_such_function")


def test_user_reward_by_import_path(tmp_path, monkeypatch):
    module = tmp_path / "my_reward_mod.py"
    module.write_text(
        textwrap.dedent(
            """
            def length_reward(model_text, ground_truth, metadata):
                return len(model_text) / 10 + (1.0 if metadata.get("ability") == "math" else 0.0)

            def dict_reward(model_text, ground_truth, metadata):
                return {"score": 0.25, "reason": "fixed"}

            def bad_reward(model_text, ground_truth, metadata):
                return float("nan")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reward = get_reward_function("my_reward_mod:length_reward")
    assert reward("abcde", "x", {"ability": "math"}) == 1.5
    assert get_reward_function("my_reward_mod:dict_reward").compute("a", "b", {}).reason == "fixed"
    with pytest.raises(TypeError):
        get_reward_function("my_reward_mod:bad_reward")("a", "b", {})


def test_register_reward_function(monkeypatch):
    from llamafactory_agentic.rewards import registry

    # the registration is undone after the test: other tests (in the same xdist worker) list the registered names
    monkeypatch.setattr(registry, "_REWARD_FACTORIES", dict(registry._REWARD_FACTORIES))

    @register_reward_function("test_constant_reward_b", overwrite=True)
    def constant(model_text, ground_truth, metadata):
        return 0.5

    assert get_reward_function("test_constant_reward_b")("x", "y", {}) == 0.5
    with pytest.raises(ValueError):
        register_reward_function("test_constant_reward_b")(constant)
    with pytest.raises(ValueError):
        register_reward_function("a:b")


def test_eos_text_inside_an_observation_does_not_cut_the_view(tiny_tokenizer):
    # a tool output holding the literal chat-template text: the tokenizer maps it to the special ids (loss mask 0)
    tok = tiny_tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    observation = " <result>\nsee <|im_end|>\n<|im_start|>assistant\nthe page\n</result>"
    ids, mask = _response(
        tok,
        [
            ("<think> look it up </think><search> capital of France </search>", 1),
            (observation, 0),
            (" <think> found it </think><answer> \\boxed{Paris} </answer>", 1),
        ],
    )
    assert eos in [t for t, m in zip(ids, mask) if m == 0]  # the observation really holds the EOS id
    view = build_model_view(tok, ids + [eos], mask + [1], eos)
    assert view == (
        "<think> look it up </think><search> capital of France </search>"
        + RESULT_PLACEHOLDER
        + " <think> found it </think><answer> \\boxed{Paris} </answer>"
    )
    assert get_reward_function("f1")(view, "Paris", {}) == 1.0


def test_user_reward_reports_format_ok_and_correctness(tmp_path, monkeypatch):
    # docs/algorithms.md §6 scale: -1 = format failure, [0, 1] correctness, 1.1 = correct with the tool bonus
    module = tmp_path / "my_scored_reward_mod.py"
    module.write_text(
        textwrap.dedent(
            """
            def from_metadata(model_text, ground_truth, metadata):
                return metadata["score"]

            def as_dict(model_text, ground_truth, metadata):
                return {"score": metadata["score"]}
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("my_scored_reward_mod:from_metadata", "my_scored_reward_mod:as_dict"):
        reward = get_reward_function(name)
        got = [reward.compute("x", "y", {"score": s}) for s in (-1.0, -0.5, 0.0, 0.4, 1.0, 1.1)]
        assert [r.format_ok for r in got] == [False, True, True, True, True, True]
        assert [r.correctness for r in got] == [0.0, 0.0, 0.0, 0.4, 1.0, 1.0]
        assert [r.score for r in got] == [-1.0, -0.5, 0.0, 0.4, 1.0, 1.1]
