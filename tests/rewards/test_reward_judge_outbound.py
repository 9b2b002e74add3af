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

"""The LLM judge's outbound limits and decision rule (issue 34: high 1 and the low items on the judge).

A real `LLMJudge` (httpx) against servers on 127.0.0.1: a judge that trickles one byte a second (before: stuck at 45 s
with `timeout_s=3, retries=2`), `Retry-After` on 429 (before: ignored), the recipe keys of the `judge` reward's
timeout and retries (before: 120 s x 3 fixed), and a hedging reply (before: counted as correct).
"""

import json
from types import SimpleNamespace

import pytest
from outbound_helpers import call_with_limit, trickling_server

from llamafactory_agentic.rewards import judge as judge_module
from llamafactory_agentic.rewards.compound import judge_settings_from_args
from llamafactory_agentic.rewards.judge import LLMJudge, Verdict, VerdictCache, judge_prompt, reply_says_correct


def _chat(text: str) -> str:
    return json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})


def _judge_in_thread(judge, limit_s: float):
    """`(verdict, seconds)` of one judge call run in a thread that the test waits `limit_s` for (None: still running)."""
    return call_with_limit(lambda: judge.judge_one("Capital of France?", ["Paris"], "Lyon", equivalent=False), limit_s)


def test_trickling_judge_ends_within_timeout_times_retries(local_http, tmp_path):
    server = trickling_server(local_http, _chat("Correct").encode() + b" " * 100)
    judge = LLMJudge(server.url, "judge", VerdictCache(tmp_path / "v.sqlite"), timeout_s=1.5, retries=2,
                     retry_wait_s=0.01)  # fmt: skip
    verdict, seconds = _judge_in_thread(judge, 12.0)
    print(f"trickling judge: error after {seconds:.2f} s")
    assert verdict is not None, "the judge call was still running after 12 s (timeout 1.5 s x 2 attempts)"
    assert verdict.source == "error" and "no complete answer from 127.0.0.1 within" in verdict.error
    assert seconds < 3.6 and len(server.requests) == 2
    judge.close()


def test_judge_honours_retry_after_within_its_deadline(local_http, tmp_path):
    """429 with `Retry-After: 1`: the next attempt waits 1 s; a `Retry-After` past the deadline ends the call at once."""

    def route(handler, method, body):
        server = box[0]
        if handler.path.startswith("/later"):
            server.send(handler, 429, "slow down", "text/plain", {"Retry-After": "3600"})
        elif len([r for r in server.requests if r[1].startswith("/v1")]) == 1:
            server.send(handler, 429, "slow down", "text/plain", {"Retry-After": "1"})
        else:
            server.send(handler, 200, _chat("Incorrect"))

    box = []
    box.append(local_http(route))
    server = box[0]
    judge = LLMJudge(server.url + "/v1", "judge", VerdictCache(tmp_path / "v.sqlite"), timeout_s=5, retries=3,
                     retry_wait_s=0.01)  # fmt: skip
    verdict, seconds = _judge_in_thread(judge, 12.0)
    assert verdict is not None and verdict.source == "judge" and verdict.correct is False
    times = [r for r in server.requests if r[1].startswith("/v1")]
    assert len(times) == 2 and seconds >= 0.95, f"the retry came {seconds:.2f} s after the 429 with Retry-After: 1"
    judge.close()

    later = LLMJudge(server.url + "/later", "judge", VerdictCache(tmp_path / "w.sqlite"), timeout_s=2, retries=3,
                     retry_wait_s=0.01)  # fmt: skip
    verdict, seconds = _judge_in_thread(later, 12.0)
    assert verdict is not None and verdict.source == "error" and seconds < 1.0
    assert "Retry-After 3600 s is past the call's 6 s" in verdict.error
    assert len([r for r in server.requests if r[1].startswith("/later")]) == 1
    later.close()


def test_judge_reward_timeout_and_retries_are_recipe_keys():
    settings = judge_settings_from_args(
        SimpleNamespace(
            agentic_reward_judge_url="http://127.0.0.1:1/v1",
            agentic_reward_judge_model="m",
            agentic_reward_judge_timeout=7.5,
            agentic_reward_judge_retries=1,
        )  # fmt: skip
    )
    assert (settings.timeout_s, settings.retries) == (7.5, 1)
    defaults = judge_settings_from_args(SimpleNamespace())
    assert (defaults.timeout_s, defaults.retries) == (120.0, 3)
    with pytest.raises(ValueError, match="agentic_reward_judge_timeout must be a number of seconds > 0"):
        judge_settings_from_args(SimpleNamespace(agentic_reward_judge_timeout=0))
    with pytest.raises(ValueError, match="agentic_reward_judge_retries must be an integer >= 1"):
        judge_settings_from_args(SimpleNamespace(agentic_reward_judge_retries=0))


@pytest.mark.parametrize(
    ("reply", "current", "reference"),
    [
        ("Correct", True, True),
        ("**Correct.**", True, True),
        ("The predicted answer is correct.", True, True),
        ("<judgment>Correct</judgment>", True, True),
        ("Incorrect", False, False),
        ("The prediction is not correct", False, False),
        ("I cannot tell if this is correct", False, True),
        ("It is unclear whether the answer is correct.", False, True),
        ("Not sure; possibly correct", False, True),
        ("banana", False, False),
    ],
)
def test_hedging_reply_is_not_correct_in_the_current_profile(reply, current, reference):
    assert reply_says_correct(reply) is current
    assert judge_module.reply_says_correct_reference(reply) is reference
    verdict = Verdict(reply_says_correct(reply), "judge", reply)
    assert verdict.reference_correct is reference


def test_judge_hedge_verdicts_from_a_server_and_from_the_cache(local_http, tmp_path):
    """A live hedge is incorrect (current) and correct (reference); a hedge cached as correct is read again."""
    server = local_http(lambda h, m, b: server.send(h, 200, _chat("I cannot tell if this is correct")))
    cache = VerdictCache(tmp_path / "v.sqlite")
    judge = LLMJudge(server.url, "judge", cache, timeout_s=5, retries=1)
    live = judge.judge_one("Capital of France?", ["Paris"], "Lyon", equivalent=False)
    assert (live.source, live.correct, live.reference_correct) == ("judge", False, True)
    old = judge_prompt("Capital of Italy?", ["Rome"], "Milan")
    cache.put("judge", old, "I cannot tell if this is correct", True)  # a verdict stored by the old rule
    again = judge.judge_one("Capital of Italy?", ["Rome"], "Milan", equivalent=False)
    assert (again.source, again.correct, again.reference_correct) == ("cache", False, True)
    assert len(server.requests) == 1
    judge.close()


def test_scoring_profiles_read_a_hedging_judge_reply_each_by_its_rule(local_http, tmp_path):
    """`score_records` on one judge-headline record: a hedge is not correct in `current`, correct in `reference`."""
    from llamafactory_agentic.evaluation.runner import score_records

    server = local_http(lambda h, m, b: server.send(h, 200, _chat("I cannot tell if this is correct")))
    record = {
        "key": "deep/0/0", "benchmark": "deep", "task": "qa", "question": "Capital of France?", "answers": ["Paris"],
        "prediction": "Lyon", "finish_reason": "answer", "scores": {"em": 0.0, "f1": 0.0, "math_equiv": 0.0},
        "segments": [["model", "<answer> \\boxed{Lyon} </answer>"]],
    }  # fmt: skip
    scoring = {"judge_base_url": server.url, "judge_model": "j", "judge_retries": 1, "judge_timeout": 5}
    (scored,), stats = score_records([record], {"benchmarks": {"deep": {"metric": "judge"}}}, scoring, tmp_path)
    assert scored["headline"]["correct"] is False  # before: True (any "correct" without a negative word)
    assert scored["reference"]["headline"]["correct"] is True  # the reference's own rule, kept
    assert (
        stats["calls"] == 2
    )  # the reference profile sends the reference's own request (issue 34 item 8): its own call
