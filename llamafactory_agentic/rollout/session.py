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

r"""`RolloutSession`: one rollout stack (agent loop, generation engine, tool executor) behind one small interface.

Training (`train/arpo/workflow.py`), the synthetic task's evaluation (`tasks/evaluate.py`) and the evaluation harness
(`evaluation/runner.py`) build their stack with `open_rollout_session`, and the trainer talks to the session only:

* `rollout(prompts, training)` - one batch of prompts (training: M trajectories with branching; validation: one
  greedy trajectory), with the engine's decode timing (`hf_engine.decode_metrics`) added to the output's `timing`;
  `stream(items, on_finished, max_in_flight)` - the evaluation's continuous scheduler (`AgenticRollout.stream`).
* `sync_weights(model)` - give the engine the current policy (hf: the module it decodes with; vllm: a weight push)
  after an optimiser step; `backend` and `lora_merge` say how the caller prepares the policy for it.
* `save_rng_state(directory, rank, log_rng)` / `restore_rng_state(...)` (and `rng_state` / `load_rng_state` for
  the states themselves) - the rollout's own generators for checkpoints (`rollout/rng_state.py`).
* `pop_metrics()` - the tool executor's counters since the last call (`tools/*`).
* `show_progress(...)` / `set_phase(...)` - the progress bar and LLaMA-Board's status file (`rollout/progress.py`).
* `close()` - closes what the session built (the executor it made from tool keys, an engine closer it was given).
"""

from collections.abc import Callable, Iterable, Mapping
from types import SimpleNamespace
from typing import Any

from .engine import EngineCapabilities, capabilities_of
from .hf_engine import decode_metrics
from .progress import RolloutProgress
from .rng_state import load_rollout_rng_state, rollout_rng_state, save_rollout_rng_state, set_rollout_rng_state


class RolloutSession:
    r"""One agent loop with its engine and tool executor; see the module docstring for the interface.

    Args:
        agent: The agent loop (`AgenticRollout`, or any object with `rollout(prompts, training)`; its `engine` and
            `config` are optional).
        executor: The tool executor whose metrics `pop_metrics` returns (None: no tool metrics).
        owns_executor: `close()` closes the executor.
        closer: Called by `close()` (e.g. an endpoint engine's `close`).
    """

    def __init__(
        self, agent: Any, executor: Any = None, owns_executor: bool = False, closer: Callable[[], Any] | None = None
    ) -> None:
        r"""See the class docstring."""
        self.agent = agent
        self.executor = executor
        self._owns_executor = owns_executor
        self._closer = closer

    # ------------------------------------------------------------------------------------------------ what it is
    @property
    def engine(self) -> Any:
        r"""The generation engine (None for an agent loop without one)."""
        return getattr(self.agent, "engine", None)

    @property
    def backend(self) -> str:
        r"""The engine's registered name (`arpo_rollout_backend`), for messages only: decide from `capabilities`."""
        return getattr(getattr(self.agent, "config", None), "backend", "hf")

    @property
    def capabilities(self) -> EngineCapabilities:
        r"""The engine's `EngineCapabilities` (`rollout.engine.capabilities_of`).

        An engine without a declaration gets those registered under `backend`.
        """
        return capabilities_of(self.engine, self.backend)

    @property
    def lora_merge(self) -> str:
        r"""`arpo_hf_lora_merge`: how a LoRA policy is put into its generation form for the hf engine."""
        return getattr(getattr(self.agent, "config", None), "hf_lora_merge", "gpu")

    # ------------------------------------------------------------------------------------------------ generation
    def rollout(self, prompts: list[list[int]], training: bool, ground_truths: list[Any] | None = None) -> Any:
        r"""Roll out `prompts` (token ids); the engine's decode timing is added to the output's `timing`.

        `ground_truths` (one per prompt, optional) are handed to the agent loop only when its contamination guard
        needs them (`RolloutConfig.contamination_mode` `mask`/`drop`, docs/plan.md §3).

        Returns:
            The agent loop's `RolloutOutput` (`groups`, `metrics`, `timing`).
        """
        engine = self.engine
        before = dict(getattr(engine, "stats", None) or {})
        mode = getattr(getattr(self.agent, "config", None), "contamination_mode", "log")
        guard = {"ground_truths": ground_truths} if mode != "log" and ground_truths is not None else {}
        output = self.agent.rollout(prompts, training=training, **guard)
        output.timing.update(decode_metrics(before, getattr(engine, "stats", None) or {}))
        return output

    def stream(self, items: Iterable, on_finished: Callable[[Any, Any], None], max_in_flight: int) -> dict:
        r"""`AgenticRollout.stream`: trajectories handed to `on_finished` as each ends; returns the loop's counters."""
        return self.agent.stream(items, on_finished, max_in_flight=max_in_flight)

    def register_prompt(self, ids: list[int], messages: list[dict], system: str | None) -> None:
        r"""Tell a chat-API engine the messages behind `ids` (other engines need nothing)."""
        if hasattr(self.engine, "register_prompt"):
            self.engine.register_prompt(ids, messages, system)

    def sync_weights(self, model: Any, version: int | None = None) -> None:
        r"""Give the engine the current policy (`engine.set_model`); nothing without an engine.

        `version` (when given): optimiser steps behind the weights, stamped on every generated token
        (`GenerationResult.weight_version`).
        """
        engine = self.engine
        if engine is not None:
            if version is not None:  # before the push: a server engine sends the version with the weights
                inner = engine._engine if isinstance(engine, RolloutProgress) else engine
                inner.weight_version = int(version)
            engine.set_model(model)

    # ------------------------------------------------------------------------------------------------ observability
    def show_progress(self, enabled: bool, status_path: str | None) -> None:
        r"""Wrap the engine in `RolloutProgress` (bar on this process when `enabled`, status JSON at `status_path`)."""
        engine = self.engine
        if engine is not None and hasattr(engine, "generate") and not isinstance(engine, RolloutProgress):
            self.agent.engine = RolloutProgress(engine, enabled=enabled, status_path=status_path)

    def set_phase(self, training: bool, global_step: int) -> None:
        r"""Label the next rollout call in the progress status (`training`/`validation`, optimiser steps done)."""
        engine = self.engine
        if isinstance(engine, RolloutProgress):
            engine.phase, engine.global_step = ("training" if training else "validation"), global_step

    def pop_metrics(self) -> dict[str, Any]:
        r"""The tool executor's metrics since the last call (`tools/*`; empty without an executor)."""
        return self.executor.pop_metrics() if self.executor is not None else {}

    # ------------------------------------------------------------------------------------------------ checkpoints
    def rng_state(self, log_rng: Any) -> dict[str, Any]:
        r"""JSON-serialisable states of the rollout's generators and of `log_rng` (`rng_state.rollout_rng_state`)."""
        return rollout_rng_state(self.agent, log_rng)

    def load_rng_state(self, log_rng: Any, state: dict[str, Any]) -> None:
        r"""Inverse of `rng_state`."""
        set_rollout_rng_state(self.agent, log_rng, state)

    def save_rng_state(self, directory: str, rank: int, log_rng: Any) -> str:
        r"""Write `rng_state(log_rng)` to `rng_state.rng_state_path(directory, rank)` and return the path."""
        return save_rollout_rng_state(directory, rank, self.agent, log_rng)

    def restore_rng_state(self, directory: str, rank: int, log_rng: Any) -> bool:
        r"""Restore what `save_rng_state` wrote; False (nothing changed) when `directory` has no such file."""
        return load_rollout_rng_state(directory, rank, self.agent, log_rng)

    def close(self) -> None:
        r"""Close the executor the session built and call its closer (each at most once)."""
        closer, self._closer = self._closer, None
        try:
            if self._owns_executor and self.executor is not None:
                self._owns_executor = False
                self.executor.close()
        finally:
            if closer is not None:
                closer()


def open_rollout_session(
    config: Any,
    tokenizer: Any,
    *,
    tools: Any,
    model: Any = None,
    engine: Any = None,
    closer: Callable[[], Any] | None = None,
    tool_protocol: str | None = None,
    template: Any = None,
    **engine_options: Any,
) -> RolloutSession:
    r"""The one factory of rollout stacks: engine (built unless given), tool executor (built unless given), agent loop.

    Args:
        config: `RolloutConfig` (its `backend` picks the engine that `rollout.build_engine` builds).
        tokenizer: The tokenizer.
        tools: A built tool executor (kept open by `close()`), or the `agentic_*` tool keys to build one from
            (`tools.build_executor_from_args`: a `ToolsConfig`, arguments, or a mapping of keys; closed by `close()`).
        model: The policy the engine decodes with (needed when `engine` is None).
        engine: An engine built by the caller (an endpoint, a vLLM `LLM`, a test double).
        closer: Called by `close()` (e.g. the endpoint engine's `close`).
        tool_protocol: `agentic_tool_protocol`: `inline_tags` (None: the configured tools' tags) or `template` (the
            chat template's native tool calls, which needs `template`; `rollout.tool_format.build_tool_format`).
        template: LLaMA-Factory's chat template of the run (for `tool_protocol: template`).
        **engine_options: Extra `build_engine` options (e.g. `max_batch_size`).

    Returns:
        The `RolloutSession`.

    Raises:
        What `tools.build_executor_from_args` and `rollout.build_engine` raise (a bad tool key or config, an unknown
        backend, vLLM missing); an executor built here is closed again when the engine cannot be built.
    """
    from ..tools import build_executor_from_args
    from .agent_loop import AgenticRollout
    from .engine import build_engine
    from .tool_format import build_tool_format

    owns = not hasattr(tools, "pop_metrics")
    if owns:
        executor = build_executor_from_args(SimpleNamespace(**tools) if isinstance(tools, Mapping) else tools)
    else:
        executor = tools
    try:
        if engine is None:
            engine = build_engine(config.backend, model, tokenizer, config, **engine_options)
        tool_format = build_tool_format(tool_protocol, executor, template, tokenizer)
        agent = AgenticRollout(engine, executor, tokenizer, config, tool_format=tool_format)
    except BaseException:
        if owns:
            executor.close()
        raise
    return RolloutSession(agent, executor, owns_executor=owns, closer=closer)


def as_session(rollout: Any, executor: Any = None) -> RolloutSession:
    r"""`rollout` itself when it is a `RolloutSession`, else a session around that agent loop and `executor`."""
    if isinstance(rollout, RolloutSession):
        return rollout
    return RolloutSession(rollout, executor)
