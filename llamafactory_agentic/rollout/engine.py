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

"""Generation engine interface shared by the `hf` and `vllm` backends, and the registry of engines.

The agent loop (`agent_loop.py`) sends one `GenerationRequest` per active trajectory per round and receives one
`GenerationResult` each. A request carries token ids only (prompt and response so far): nothing is re-tokenised.

Engines are registered by name (`register_engine`) with their `EngineCapabilities`; the trainer and the rollout
session decide how to hand weights over from the capabilities, never from a backend name (docs/architecture.md,
"Rollout engines"). A server engine (vLLM's own server on GPUs of its own) registers with `separate_process=True`.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class SamplingSettings:
    r"""Sampling parameters of one round (same for every request of the round).

    Attributes:
        temperature: 0 means greedy.
        top_p: Nucleus mass (1.0 = off).
        top_k: Top-k filter (0 = off).
        stop_strings: A round ends right after the token that completes one of these (token kept).
        eos_token_ids: Token ids that end the trajectory (kept in the output).
        entropy_source: `topk` or `full` (docs/algorithms.md §3.2).
        entropy_topk: k of the `topk` source.
        entropy_tokens: Positions per round whose entropy terms are returned.
        repetition_penalty: Penalty of tokens already in the context (prompt and response), as in transformers and
            vLLM: a positive logit is divided by it, a negative one multiplied, before temperature and filtering.
            1.0 (default) leaves the logits untouched; the evaluation protocol uses 1.1 (docs/algorithms.md §9).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop_strings: tuple[str, ...] = ("</search>", "</python>")
    eos_token_ids: tuple[int, ...] = ()
    entropy_source: Literal["topk", "full"] = "topk"
    entropy_topk: int = 10
    entropy_tokens: int = 20
    repetition_penalty: float = 1.0

    @property
    def greedy(self) -> bool:
        r"""Whether decoding is greedy."""
        return self.temperature <= 0.0


@dataclass(frozen=True)
class EngineCapabilities:
    r"""What an engine can do, read by the trainer and the session instead of the engine's name.

    Attributes:
        shares_policy_weights: Decodes with the trained module itself (the hf engine): the caller puts the module in
            its generation form and gathers sharded parameters around each rollout; False: the engine holds its own
            copy of the weights and gets them pushed (`set_model`) once per optimiser step.
        separate_process: Runs in another process or server (weights travel over a transport, not by reference).
        returns_logprobs: Every `GenerationResult` carries `logprobs` (the behaviour log-prob of each sampled token
            under the weights that sampled it) and `weight_version` (docs/algorithms.md §13).
        prefix_branching: Continues a trajectory from a shared prefix without recomputing it (ARPO's branches reuse
            the source's KV rows or the engine's prefix cache).
    """

    shares_policy_weights: bool = False
    separate_process: bool = False
    returns_logprobs: bool = False
    prefix_branching: bool = False


@dataclass(frozen=True)
class EngineSpec:
    r"""A registered engine: name, capabilities, `factory(model, tokenizer, config, **kwargs)` and `preflight`.

    `preflight()` (optional) raises before any model is loaded, e.g. a missing package with its install hint.
    """

    name: str
    capabilities: EngineCapabilities
    factory: Callable[..., "GenerationEngine"]
    preflight: Callable[[], None] | None = None


_ENGINES: dict[str, EngineSpec] = {}


def register_engine(
    name: str,
    capabilities: EngineCapabilities,
    factory: Callable[..., "GenerationEngine"],
    preflight: Callable[[], None] | None = None,
) -> None:
    r"""Register an engine under `name` (the value of `arpo_rollout_backend`).

    Raises:
        ValueError: `name` is already registered.
    """
    if name in _ENGINES:
        raise ValueError(f"rollout engine {name!r} is already registered")
    _ENGINES[name] = EngineSpec(name, capabilities, factory, preflight)


def check_engine_available(name: str) -> None:
    r"""Run the engine's `preflight` (the workflow calls it before the policy loads).

    Raises:
        ValueError: no engine of that name; whatever the engine's preflight raises (vllm: `ImportError` with the
            install hint when vLLM is not installed).
    """
    spec = engine_spec(name)
    if spec.preflight is not None:
        spec.preflight()


def engine_spec(name: str) -> EngineSpec:
    r"""The registered engine `name`.

    Raises:
        ValueError: no engine of that name (the message lists the registered ones).
    """
    if name not in _ENGINES:
        raise ValueError(f"Unknown rollout backend {name!r}; expected one of {', '.join(repr(n) for n in _ENGINES)}.")
    return _ENGINES[name]


def capabilities_of(engine: Any, backend: str | None = None) -> EngineCapabilities:
    r"""An engine object's declared `capabilities`, else those registered for `backend`, else none at all."""
    caps = getattr(engine, "capabilities", None)
    if isinstance(caps, EngineCapabilities):
        return caps
    if backend is not None and backend in _ENGINES:
        return _ENGINES[backend].capabilities
    return EngineCapabilities()


@dataclass
class GenerationRequest:
    r"""Continue one trajectory for one round.

    Attributes:
        key: Stable id of the trajectory within the rollout call (an engine may keep state, e.g. a KV cache, per key).
        prompt_ids: Prompt token ids.
        response_ids: Response token ids so far (context = prompt + response).
        max_tokens: Most tokens to generate this round (R - len(response), docs/algorithms.md §12).
        parent_key: Key of the source trajectory when this trajectory is a fresh branch (hint for KV reuse).
        seed: Sampling seed of this request for engines that seed per request (`hf`, `vllm`, the evaluation's
            endpoint engine), so that a trajectory samples the same tokens whatever else is in the batch; None (default): the
            engine's own generator (the `hf` engine: `hf_engine.seeded_exponential_noise`).
    """

    key: int
    prompt_ids: Sequence[int]
    response_ids: Sequence[int]
    max_tokens: int
    parent_key: int | None = None
    seed: int | None = None


@dataclass
class GenerationResult:
    r"""Tokens of one round.

    Attributes:
        token_ids: Generated ids; include the EOS or the token completing a stop string.
        entropy_terms: Entropy term per position of the first `entropy_tokens` positions (nats).
        finish_reason: `"stop"` (stop string), `"eos"`, `"length"` (`max_tokens` reached) or `"error"` (a remote
            engine gave no answer; the agent loop ends the trajectory with finish reason `error`).
        stop_string: The stop string that ended the round, if any.
        error: What went wrong when `finish_reason == "error"`.
        logprobs: Behaviour log-prob of each token of `token_ids` under the weights that sampled it, at the sampling
            temperature, before repetition penalty, top-k and top-p (the quantity the trainer recomputes,
            docs/algorithms.md §13); empty when the engine does not return them (`returns_logprobs` False).
        weight_version: Version of the weights that sampled the tokens (optimiser steps behind them); None: unknown.
    """

    token_ids: list[int]
    entropy_terms: list[float] = field(default_factory=list)
    finish_reason: Literal["stop", "eos", "length", "error"] = "length"
    stop_string: str | None = None
    error: str = ""
    logprobs: list[float] = field(default_factory=list)
    weight_version: int | None = None


class RequestSource(ABC):
    r"""Where `GenerationEngine.serve` gets its requests and leaves its results (continuous batching).

    The engine calls `take(n)` whenever it has `n` free places, `put(request, result)` as soon as a request's round
    has ended, `waiting()` when it has nothing to decode (True: more requests will come, e.g. after tool calls) and then
    `wait()`, which blocks until `take` has something again.
    """

    @abstractmethod
    def take(self, limit: int) -> list[GenerationRequest]:
        r"""Up to `limit` requests that can start now (possibly none)."""

    @abstractmethod
    def put(self, request: GenerationRequest, result: GenerationResult) -> None:
        r"""The round of `request` has ended with `result`."""

    def waiting(self) -> bool:
        r"""Whether requests will still come although `take` has none now."""
        return False

    def wait(self) -> None:
        r"""Block until `take` has a request (only called while `waiting()` is True)."""


class ListSource(RequestSource):
    r"""The requests of one `generate` call: handed out in order, results kept in request order (`results`)."""

    def __init__(self, requests: Sequence[GenerationRequest]) -> None:
        r"""Serve `requests` (engine keys must be unique among them)."""
        self.requests = list(requests)
        self.results: list[GenerationResult | None] = [None] * len(self.requests)
        self._index = {id(r): i for i, r in enumerate(self.requests)}
        self._next = 0

    def take(self, limit: int) -> list[GenerationRequest]:
        r"""The next `limit` requests."""
        out = self.requests[self._next : self._next + max(limit, 0)]
        self._next += len(out)
        return out

    def put(self, request: GenerationRequest, result: GenerationResult) -> None:
        r"""Keep the result at the request's position."""
        self.results[self._index[id(request)]] = result


class GenerationEngine(ABC):
    r"""Backend that continues many trajectories in parallel for one round.

    `capabilities` (class attribute) declares what it can do (`EngineCapabilities`); `weight_version` is the version
    of the weights it decodes with (set by `set_model`'s caller, `RolloutSession.sync_weights`).
    """

    capabilities: EngineCapabilities = EngineCapabilities()
    weight_version: int = 0

    @abstractmethod
    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[GenerationResult]:
        r"""Generate one round for every request (results in request order)."""

    def serve(self, source: RequestSource, sampling: SamplingSettings) -> None:
        r"""Generate everything `source` hands out; engines with continuous batching (hf) override this.

        This default works in batches: it takes every ready request, generates their round with `generate`, hands
        the results back, and repeats (waiting on the source when it has nothing ready) until the source is done.
        """
        while True:
            requests = source.take(1 << 30)
            if not requests:
                if not source.waiting():
                    return
                source.wait()
                continue
            for request, result in zip(requests, self.generate(requests, sampling)):
                source.put(request, result)

    def set_model(self, model: Any) -> None:
        r"""Hand the current policy to the engine (called by the trainer each step). Drops cached state."""

    def reset(self) -> None:
        r"""Forget every per-key state (called at the start of each rollout call)."""

    def finish(self, keys: Sequence[int]) -> None:
        r"""These trajectories will not be continued (an engine may free their state)."""

    def release(self) -> None:
        r"""Free generation memory after a rollout call (before the optimisation phase)."""


class StopStringMatcher:
    r"""Incremental stop-string detection on the decoded tail of a row.

    A stop string can only be completed by a token whose text contains the stop string's last character (or whose
    text is not decodable on its own, e.g. a partial UTF-8 byte); only such tokens trigger a decode of the row's last
    few tokens, so the per-token host cost is a table lookup.

    Args:
        tokenizer: Hugging Face tokenizer.
        stop_strings: The stop strings.
    """

    def __init__(self, tokenizer: Any, stop_strings: Sequence[str]) -> None:
        r"""Create the matcher (arguments in the class docstring); the token table is built on first use."""
        self.tokenizer = tokenizer
        self.stop_strings = tuple(stop_strings)
        self._window = max((len(s) for s in self.stop_strings), default=0) + 2
        self._candidates: set[int] | None = None

    def _build(self) -> set[int]:
        last_chars = {s[-1] for s in self.stop_strings if s}
        vocab = self.tokenizer.get_vocab()
        ids = sorted(vocab.values())
        texts = self.tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=False)
        return {i for i, t in zip(ids, texts) if (not t) or ("\ufffd" in t) or any(c in t for c in last_chars)}

    def check(self, generated: Sequence[int]) -> str | None:
        r"""Return the stop string completed by the last token of `generated`, else None."""
        if not self.stop_strings or not generated:
            return None
        if self._candidates is None:
            self._candidates = self._build()
        if generated[-1] not in self._candidates:
            return None
        text = self.tokenizer.decode(list(generated[-self._window :]), skip_special_tokens=False)
        for stop in self.stop_strings:
            if stop in text:
                return stop
        return None


def build_engine(backend: str, model: Any, tokenizer: Any, config: Any, **kwargs: Any) -> GenerationEngine:
    r"""Create the generation engine registered as `backend` (`register_engine`).

    Args:
        backend: `"hf"` (transformers; CPU and GPU), `"vllm"` (extra `llamafactory-agentic[vllm]`), `"vllm_server"`
            (vLLM's own server, `rollout/server_engine.py`) or another registered name.
        model: The policy (`PreTrainedModel`); for `vllm` its `name_or_path` is loaded by vLLM.
        tokenizer: The tokenizer.
        config: `RolloutConfig`.
        **kwargs: Backend-specific options (see `HFEngine` / `VLLMEngine`).

    Returns:
        The engine.

    Raises:
        ValueError: unknown backend. ImportError: vLLM requested but not installed.
    """
    return engine_spec(backend).factory(model, tokenizer, config, **kwargs)


def _build_hf(model: Any, tokenizer: Any, config: Any, **kwargs: Any) -> GenerationEngine:
    from .hf_engine import HFEngine

    kwargs.setdefault("max_batch_size", config.hf_generation_batch_size)
    kwargs.setdefault("prefix_cache", config.hf_prefix_cache)
    kwargs.setdefault("max_context", config.max_prompt_length + config.max_response_length)
    kwargs.setdefault("seed", config.seed)
    return HFEngine(model, tokenizer, **kwargs)


def _build_vllm(model: Any, tokenizer: Any, config: Any, **kwargs: Any) -> GenerationEngine:
    from .vllm_engine import VLLMEngine

    kwargs.setdefault("gpu_memory_utilization", config.vllm_gpu_memory_utilization)
    kwargs.setdefault("enable_sleep_mode", config.vllm_enable_sleep_mode)
    kwargs.setdefault("max_model_len", config.max_prompt_length + config.max_response_length)
    kwargs.setdefault("seed", config.seed)
    return VLLMEngine(model, tokenizer, **kwargs)


HF_CAPABILITIES = EngineCapabilities(
    shares_policy_weights=True, separate_process=False, returns_logprobs=True, prefix_branching=True
)
VLLM_CAPABILITIES = EngineCapabilities(
    shares_policy_weights=False, separate_process=False, returns_logprobs=True, prefix_branching=True
)


def _build_vllm_server(model: Any, tokenizer: Any, config: Any, **kwargs: Any) -> GenerationEngine:
    from .server_engine import build_server_engine

    return build_server_engine(model, tokenizer, config, **kwargs)


# vLLM's own server in a process of its own (rollout/server_engine.py): weights pushed, log-probs returned, branches
# reuse the server's prefix cache
VLLM_SERVER_CAPABILITIES = EngineCapabilities(
    shares_policy_weights=False, separate_process=True, returns_logprobs=True, prefix_branching=True
)


def _vllm_preflight() -> None:
    from .vllm_engine import require_vllm

    require_vllm()


register_engine("hf", HF_CAPABILITIES, _build_hf)
register_engine("vllm", VLLM_CAPABILITIES, _build_vllm, preflight=_vllm_preflight)
register_engine("vllm_server", VLLM_SERVER_CAPABILITIES, _build_vllm_server)
