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

"""The evaluation servers' outbound limits and fail-over (issue 34: high 1 and the low item on several servers).

A real `OpenAICompletionsEngine` (httpx) against servers on 127.0.0.1: a server that trickles one byte a second
(before: still running at 70 s with `eval_request_timeout: 10`) and two servers of which one fails (before: the
failing one was retried on itself and the request failed while the other was healthy).
"""

import json

from outbound_helpers import call_with_limit, trickling_server

from llamafactory_agentic.evaluation.endpoint import OpenAICompletionsEngine
from llamafactory_agentic.rollout.engine import GenerationRequest, SamplingSettings


COMPLETION = json.dumps({"choices": [{"text": "ok", "token_ids": [5, 6], "finish_reason": "length"}]})


def _generate(engine, n: int, limit_s: float):
    """`(results, seconds)` of one round of `n` requests run in a thread the test waits `limit_s` for."""
    requests = [GenerationRequest(key=i, prompt_ids=[1, 2, 3], response_ids=[], max_tokens=2) for i in range(n)]
    return call_with_limit(
        lambda: engine.generate(requests, SamplingSettings(temperature=0.0, stop_strings=())), limit_s
    )


def test_trickling_eval_server_ends_within_its_request_timeout(local_http, tiny_tokenizer):
    server = trickling_server(local_http, COMPLETION.encode() + b" " * 60)
    engine = OpenAICompletionsEngine([server.url], tiny_tokenizer, model="m", timeout_s=1.5, retries=2,
                                     retry_wait_s=0.01, workers=2)  # fmt: skip
    results, seconds = _generate(engine, 1, 12.0)
    print(f"trickling eval server: error after {seconds:.2f} s")
    assert results is not None, "the request was still running after 12 s (timeout 1.5 s x 2 attempts)"
    assert results[0].finish_reason == "error" and "within 1.5 seconds" in results[0].error
    assert seconds < 3.6 and len(server.requests) == 2
    engine.close()


def test_failing_server_is_retried_on_the_healthy_one(local_http, tiny_tokenizer):
    down = local_http(lambda h, m, b: down.send(h, 503, "overloaded", "text/plain"))
    up = local_http(lambda h, m, b: up.send(h, 200, COMPLETION))
    engine = OpenAICompletionsEngine([down.url, up.url], tiny_tokenizer, model="m", timeout_s=5, retries=2,
                                     retry_wait_s=5.0, workers=1)  # fmt: skip
    results, seconds = _generate(engine, 1, 12.0)
    assert results is not None and results[0].finish_reason == "length" and results[0].token_ids == [5, 6]
    assert (len(down.requests), len(up.requests)) == (1, 1)  # before: 2 on the failing server, 0 on the healthy one
    assert seconds < 2.0  # no backoff before trying the other server
    results, _ = _generate(engine, 3, 12.0)  # later requests avoid the server that just failed
    assert [r.finish_reason for r in results] == ["length"] * 3
    assert (len(down.requests), len(up.requests)) == (1, 4)
    engine.close()
