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

r"""The evaluation's OpenAI-compatible engines, kept here under their old names.

They are defined in `rollout/endpoint.py` (the rollout layer), since the training's `vllm_server` engine
(`rollout/server_engine.py`) is built on them.
"""

from ..rollout.endpoint import (
    MAX_RESPONSE_BYTES,
    PROBE_USER,
    EndpointError,
    OpenAIChatEngine,
    OpenAICompletionsEngine,
    ResponseCache,
)


__all__ = [
    "MAX_RESPONSE_BYTES",
    "PROBE_USER",
    "EndpointError",
    "OpenAIChatEngine",
    "OpenAICompletionsEngine",
    "ResponseCache",
]
