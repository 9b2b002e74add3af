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

"""The chat engine's turns mode (`agentic_tool_protocol: template`) without a server: how a trajectory's ids become
chat messages, a reply that carries parsed `tool_calls` instead of text, and ids that are not the template's tool
message. The end-to-end run against a real `llamafactory-cli api` server is `test_eval_lf_api.py` (slow)."""

import pytest

from llamafactory_agentic.evaluation.endpoint import OpenAIChatEngine
from llamafactory_agentic.rollout.engine import GenerationRequest, SamplingSettings


CALL = '<tool_call>\n{"name": "python", "arguments": {"code": "print(1+1)"}}\n</tool_call>'


@pytest.fixture()
def turns(tiny_model_dir, tiny_tokenizer):
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments

    from llamafactory_agentic.rollout.tool_format import NativeToolFormat

    template = get_template_and_fix_tokenizer(tiny_tokenizer, DataArguments(template="qwen"))
    fmt = NativeToolFormat(template, tiny_tokenizer)
    # no request leaves the process: the model name is given and the start-up check is off
    engine = OpenAIChatEngine(["http://127.0.0.1:9/v1"], tiny_tokenizer, model="m", check=False, tool_format=fmt)
    yield engine, fmt, tiny_tokenizer
    engine.close()


def test_model_turns_and_observations_become_assistant_and_tool_messages(turns):
    engine, fmt, tok = turns
    prompt = tok.encode("<|im_start|>user\nWhat is 1+1?<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    engine.register_prompt(prompt, [{"role": "user", "content": "What is 1+1?"}], None)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    call = tok.encode(CALL, add_special_tokens=False) + [eos]
    observation = fmt.observation_ids(tok, "2\n")
    engine._turns[7] = [(0, len(call), CALL)]  # what `_one` records for the first round's reply
    request = GenerationRequest(key=7, prompt_ids=prompt, response_ids=call + observation, max_tokens=16)
    body = engine._body(request, SamplingSettings(temperature=0.0, stop_strings=(), eos_token_ids=(eos,)))
    assert body["messages"] == [
        {"role": "user", "content": "What is 1+1?"},
        {"role": "assistant", "content": CALL},
        {"role": "tool", "content": "2\n"},
    ]
    assert "stop" not in body and "continue_final_message" not in body

    # ids between two model turns that are not the template's tool message: an error round, not a wrong context
    bad = GenerationRequest(key=7, prompt_ids=prompt, response_ids=call + tok.encode(" junk"), max_tokens=16)
    result = engine._one(bad, SamplingSettings(temperature=0.0, stop_strings=(), eos_token_ids=(eos,)))
    assert result.finish_reason == "error" and "do not decode to the template's tool message" in result.error

    engine.finish([7])
    assert 7 not in engine._turns


def test_a_reply_with_parsed_tool_calls_is_the_templates_text_of_the_call(turns):
    engine, _, _ = turns
    choice = {"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "python", "arguments": '{"code": "print(1+1)"}'}},
    ]}}  # fmt: skip
    assert engine._choice_text(choice) == CALL


def test_text_past_a_stop_string_is_cut_where_a_server_honouring_stop_would_have_stopped(turns):
    """LLaMA-Factory's hf engine ignores `stop` (it warns and generates on to the end of the turn); the reply is cut
    right after the first stop string, as vLLM would have stopped, and encoded again."""
    engine, _, tok = turns
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    sampling = SamplingSettings(temperature=0.0, stop_strings=("</answer>", "</search>"), eos_token_ids=(eos,))
    reply = {"choices": [{"message": {"role": "assistant", "content": "<answer> 2 </answer> and more"},
                          "finish_reason": "stop"}]}  # fmt: skip
    result = engine._parse(reply, sampling)
    assert result.finish_reason == "stop" and result.stop_string == "</answer>"
    assert tok.decode(result.token_ids) == "<answer> 2 </answer>"
    # a reply that ends with its stop string, or has none, is left as the server sent it
    ended = {"choices": [{"message": {"content": "<answer> 2 </answer>"}, "finish_reason": "stop"}]}
    assert engine._parse(ended, sampling).stop_string == "</answer>"
    turn_end = {"choices": [{"message": {"content": "no tags"}, "finish_reason": "stop"}]}
    done = engine._parse(turn_end, sampling)
    assert done.finish_reason == "eos" and done.token_ids[-1] == eos
