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

"""Helpers of the outbound-deadline tests (judge, eval endpoint): a trickling server and a call the test waits for."""

import threading
import time
from collections.abc import Callable
from typing import Any


def trickling_server(local_http: Callable, body: bytes) -> Any:
    """A `LocalHTTP` server (conftest `local_http`) that answers every request 200 with `body`, one byte a second.

    No single read times out, so only a whole-request deadline ends the call (docs/tools.md "Outbound limits").
    """
    box = []
    box.append(local_http(lambda handler, method, raw: box[0].trickle(handler, body=body)))
    return box[0]


def call_with_limit(call: Callable[[], Any], limit_s: float) -> tuple[Any, float]:
    """`(result, seconds)` of `call()` run in a daemon thread that the test waits `limit_s` for.

    The result is None when the call was still running after `limit_s` seconds (the thread is left to end with the
    test process).
    """
    out = {}

    def run():
        out["result"] = call()

    start = time.perf_counter()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(limit_s)
    return out.get("result"), time.perf_counter() - start
