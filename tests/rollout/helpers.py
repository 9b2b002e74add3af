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

"""Shared helpers of the rollout tests: a scripted engine with known round entropies and a recording executor.

The scripted engine stands in for the policy only where the test needs a controllable entropy shift (branching
statistics); the real tiny Qwen2 model and a real subprocess executor are exercised in test_hf_engine.py.
"""

import math
from dataclasses import dataclass, replace

from llamafactory_agentic.rollout import GenerationEngine, GenerationResult


@dataclass
class FakeResult:
    text: str
    status: str = "ok"
    latency_s: float = 0.0
    cached: bool = False


class RecordingExecutor:
    """Answers every call with a fixed text and records the calls (tests of the loop logic only)."""

    def __init__(self, text: str = "42"):
        self.text = text
        self.calls = []
        self.batches = []

    def execute(self, calls):
        self.calls.extend(calls)
        self.batches.append(len(calls))
        return [FakeResult(text=f"{self.text}") for _ in calls]


class ScriptedEngine(GenerationEngine):
    """Per trajectory round r (inherited by branches): `plan(r) -> (text, finish, H)`, or `plan(r, key)` with the
    request's engine key for a plan with a true `keyed` attribute.

    `finish` is "stop" (text must end with a stop string), "eos" (EOS id appended) or "length" (max_tokens filled
    with a filler token). The round entropy H is returned as one entropy term H * ln|V|.
    """

    def __init__(self, tokenizer, plan, eos_token_id):
        self.tokenizer = tokenizer
        self.plan = plan
        self.eos = eos_token_id
        self.rounds = {}
        self.log_vocab = math.log(len(tokenizer.get_vocab()))
        self.requests = []
        self.filler = tokenizer.encode("a", add_special_tokens=False)[0]

    def reset(self):
        self.rounds = {}

    def generate(self, requests, sampling):
        out = []
        for req in requests:
            self.requests.append(replace(req, response_ids=list(req.response_ids)))
            r = self.rounds.get(req.key)
            if r is None:
                r = self.rounds.get(req.parent_key, 0) if req.parent_key is not None else 0
            self.rounds[req.key] = r + 1
            text, finish, h = self.plan(r, req.key) if getattr(self.plan, "keyed", False) else self.plan(r)
            ids = self.tokenizer.encode(text, add_special_tokens=False) if text else []
            stop = None
            if finish == "eos":
                ids = ids + [self.eos]
            elif finish == "stop":
                stop = next(s for s in sampling.stop_strings if text.rstrip().endswith(s))
            elif finish == "length":
                ids = ids + [self.filler] * max(0, req.max_tokens - len(ids))
            if len(ids) > req.max_tokens:
                ids, finish, stop = ids[: req.max_tokens], "length", None
            out.append(
                GenerationResult(
                    token_ids=ids, entropy_terms=[h * self.log_vocab], finish_reason=finish, stop_string=stop
                )
            )
        return out
