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

"""`vllm` generation backend (extra: `pip install llamafactory-agentic[vllm]`).

Colocated `vllm.LLM` with prefix caching (shared prefixes of branches computed once, docs/algorithms.md §3.4), prompts
given as token ids, `SamplingParams(stop=[...], include_stop_str_in_output=True, logprobs=k, flat_logprobs=True,
max_tokens=...)` per trajectory. Written for vLLM 0.22.1 - 0.23.0 (the `vllm` extra of setup.py: the releases that
pin the project's torch 2.11, docs/install.md "Install"), whose engine is V1 only: with `VLLM_ENABLE_V1_MULTIPROCESSING=0` and
`distributed_executor_backend="external_launcher"` (as TRL's colocate mode) the engine core and its worker live in
the trainer's process; the torchrun variables that executor reads are set when the launch did not set them
(`external_launcher_env`: one GPU without torchrun). Weights are pushed through the public `LLM.apply_model(fn)` (vLLM
runs `fn` on the worker's `get_model()`, the model unwrapped from its CUDA-graph wrapper; read from the 0.22.1 wheel's
`v1/worker/worker_base.py`) with the model's own `load_weights`, after each optimiser step, and the prefix cache is
reset. `logprobs_mode="processed_logprobs"` (as TRL 0.24's colocate mode): the returned log-probs are those of the
distribution sampled from, i.e. after temperature, top-k and top-p, so the round entropy matches the hf engine's at
any temperature; vLLM's default `raw_logprobs` would give the untempered model distribution. Sleep mode releases the
engine's memory during training. On the H200 with vLLM 0.22.1 (docs/scaling.md, "The vLLM backend on the H200") the
pushed weights gave log-probs within bf16 rounding of transformers on the same weights (mean 0.013 nats, max 0.057;
LoRA merged: max 0.10), sleep freed the engine's memory and waking restored it, and ARPO trained through
`llamafactory-cli train` (that run asked for vLLM's default dict log-prob container; the flat one, cheaper on the host,
has not run on a GPU yet); the tests here use a fake that honours the public `LLM.generate` / `apply_model` /
`SamplingParams` contract.

LoRA (and other peft adapters) are supported: vLLM holds the base architecture and receives the merged weights under
the base model's parameter names (`weight_sync.push_weights`: adapters merged per layer, `base_model.model.` and
`.base_layer` stripped, no `lora_*` tensors, `modules_to_save` copies instead of the frozen originals). Under
DeepSpeed ZeRO-3 the parameters are gathered module by module during the copy (see `weight_sync` for the memory
trade-off). Quantized base models (QLoRA) are not supported by this backend.
"""

import math
import os
from typing import Any

from .branching import logprob_dict_entropy_term
from .engine import VLLM_CAPABILITIES, GenerationEngine, GenerationRequest, GenerationResult, SamplingSettings
from .weight_sync import GatherFn, base_model_of, push_weights


LOGPROBS_MODE = "processed_logprobs"  # vLLM >= 0.10.1: log-probs after temperature / top-k / top-p


def external_launcher_env() -> dict[str, str]:
    r"""Set the torchrun variables vLLM's `external_launcher` executor reads, where the launch did not set them.

    vLLM 0.22's `ExecutorWithExternalLauncher` reads `RANK` and `LOCAL_RANK` from the environment and joins
    `env://` (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`): a trainer started without torchrun (one GPU, plain
    `llamafactory-cli train`) has none of them and the engine failed at start with `KeyError: 'RANK'`. Values already
    set (torchrun, accelerate) are kept; otherwise rank and world size come from an initialised `torch.distributed`
    group, else 0 and 1, the address is the loopback and the port a free one.

    Returns:
        The variables this call set (name -> value); {} when the launch had set them all.
    """
    import socket

    import torch.distributed as dist

    initialised = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if initialised else 0
    defaults = {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(dist.get_world_size() if initialised else 1),
        "MASTER_ADDR": "127.0.0.1",
    }
    added = {}
    for name, value in defaults.items():
        if not os.environ.get(name):
            os.environ[name] = added[name] = value
    if not os.environ.get("MASTER_PORT"):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = added["MASTER_PORT"] = str(sock.getsockname()[1])
    return added


VLLM_INSTALL_HINT = (
    "The vllm rollout backend needs vLLM: `pip install -c constraints.txt llamafactory-agentic[vllm]` (vLLM 0.22.1), "
    "or set `arpo_rollout_backend: hf`."
)


def require_vllm() -> None:
    r"""Refuse the vllm backend when vLLM is not installed, without importing it.

    The workflow calls this before the policy loads, so the install hint does not wait for the model.

    Raises:
        ImportError: with `VLLM_INSTALL_HINT`.
    """
    import importlib.util
    import sys

    if "vllm" in sys.modules:
        return
    try:
        found = importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ImportError(VLLM_INSTALL_HINT)


def _import_vllm():
    try:
        import vllm  # noqa: F401
    except ImportError as err:
        raise ImportError(VLLM_INSTALL_HINT) from err
    return vllm


def sampled_logprobs(token_ids: list[int], logprobs: Any) -> list[float]:
    r"""Behaviour log-prob of each sampled token from vLLM's per-position `{token_id: Logprob}` entries.

    With `logprobs_mode="processed_logprobs"` the value is that of the distribution sampled from (after temperature,
    top-k, top-p); with the training defaults (top-p 1, top-k 0) it is `log_softmax(logits / T)[token]`, the quantity
    the trainer recomputes (docs/algorithms.md §13). A position without an entry (a stop token vLLM did not sample,
    appended by `generate`) gets NaN: no correction there.
    """
    out = []
    for j, token in enumerate(token_ids):
        entry = logprobs[j] if j < len(logprobs or ()) else None
        value = entry.get(token) if entry is not None else None
        out.append(float(getattr(value, "logprob", value)) if value is not None else math.nan)
    return out


class VLLMEngine(GenerationEngine):
    r"""Round generation with a colocated vLLM engine.

    Supports full models and peft (LoRA/DoRA) models: `set_model` pushes the merged base weights (adapters merged
    temporarily per layer, PEFT prefixes stripped, no adapter tensors), gathering ZeRO-3 parameters one module at a
    time (`weight_sync.push_weights`).

    Args:
        model: The policy (transformers model or peft `PeftModel`); the base model's `name_or_path` is loaded by
            vLLM, then weights are synced by `set_model`.
        tokenizer: Its tokenizer (unused by vLLM itself; kept for the interface).
        gpu_memory_utilization: Share of GPU memory for vLLM (`arpo_vllm_gpu_memory_utilization`).
        enable_sleep_mode: Offload vLLM's weights and KV cache while the trainer optimises.
        max_model_len: Prompt + response tokens.
        seed: Sampling seed.
        llm: An already built `vllm.LLM` (tests, custom setups).
        gather: Context-manager factory gathering a module's parameters during the weight copy (default:
            DeepSpeed ZeRO-3 `GatheredParameters` when the parameters are partitioned, else a no-op).
        **llm_kwargs: Extra `vllm.LLM` arguments.

    Raises:
        ImportError: vLLM is not installed.
        ValueError: `logprobs_mode` other than `processed_logprobs` in `llm_kwargs` or on a given `llm`; (from
            `set_model`) a quantized base model under LoRA.
    """

    capabilities = VLLM_CAPABILITIES

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        gpu_memory_utilization: float = 0.6,
        enable_sleep_mode: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        llm: Any = None,
        gather: GatherFn | None = None,
        **llm_kwargs: Any,
    ) -> None:
        r"""Create or adopt the vLLM engine and push the current weights (arguments in the class docstring)."""
        self.vllm = _import_vllm()
        mode = llm_kwargs.pop("logprobs_mode", LOGPROBS_MODE)
        if llm is not None:
            model_config = getattr(getattr(llm, "llm_engine", None), "model_config", None)
            mode = getattr(model_config, "logprobs_mode", None) or LOGPROBS_MODE
            if mode != LOGPROBS_MODE:
                raise ValueError(
                    f"the vLLM engine was built with logprobs_mode={mode!r}; the rollout's round entropy needs "
                    f"logprobs_mode={LOGPROBS_MODE!r} (the distribution sampled from), build it with that"
                )
        elif mode != LOGPROBS_MODE:
            raise ValueError(
                f"the vllm backend runs vLLM with logprobs_mode={LOGPROBS_MODE!r} (entropy of the distribution "
                f"sampled from, as the hf backend); got logprobs_mode={mode!r}"
            )

        self.tokenizer = tokenizer
        self.enable_sleep_mode = enable_sleep_mode
        self.sleeping = False
        if llm is None:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            llm_kwargs.setdefault("distributed_executor_backend", "external_launcher")
            if llm_kwargs["distributed_executor_backend"] == "external_launcher":
                external_launcher_env()
            base = base_model_of(model)
            llm = self.vllm.LLM(
                model=getattr(base, "name_or_path", None) or base.config._name_or_path,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                enable_prefix_caching=True,
                enable_sleep_mode=enable_sleep_mode,
                seed=seed,
                dtype=str(next(model.parameters()).dtype).replace("torch.", ""),
                logprobs_mode=LOGPROBS_MODE,
                **llm_kwargs,
            )
        self.llm = llm
        self.gather = gather
        self.model = None
        self.set_model(model)

    def set_model(self, model: Any) -> None:
        r"""Push the policy's current weights into vLLM (after each optimiser step) and reset the prefix cache.

        One `load_weights` call per module (`weight_sync.push_weights`); for a peft model the values are the merged
        base weights under the base model's names. The model is left unchanged (adapters unmerged, same tensors).
        Under ZeRO-3, pass the model without gathering it first: parameters are gathered per module here.
        """
        self.model = model
        if model is None:
            return
        self.wake_up()
        # in-process engine core (VLLM_ENABLE_V1_MULTIPROCESSING=0): `fn` runs here, on the worker's unwrapped model
        self.llm.apply_model(lambda vllm_model: push_weights(model, vllm_model.load_weights, gather=self.gather))
        self.llm.reset_prefix_cache()

    def wake_up(self) -> None:
        r"""Bring weights and KV cache back onto the GPU (sleep mode)."""
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def release(self) -> None:
        r"""Sleep (level 1: weights offloaded, KV cache discarded) while the trainer optimises."""
        if self.enable_sleep_mode and not self.sleeping:
            self.llm.sleep(level=1)
            self.sleeping = True

    def reset(self) -> None:
        r"""Wake the engine for a new rollout call."""
        self.wake_up()

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[GenerationResult]:
        r"""One round for every request through `LLM.generate` with per-request `SamplingParams`."""
        self.wake_up()
        results: list[GenerationResult | None] = [None] * len(requests)
        prompts, params, index = [], [], []
        for i, req in enumerate(requests):
            if req.max_tokens <= 0:
                results[i] = GenerationResult(token_ids=[], finish_reason="length")
                continue
            prompts.append({"prompt_token_ids": list(req.prompt_ids) + list(req.response_ids)})
            extra = {}  # only what differs from vLLM's defaults, so training requests stay as they were
            if sampling.repetition_penalty != 1.0:
                extra["repetition_penalty"] = sampling.repetition_penalty
            if req.seed is not None:
                extra["seed"] = int(req.seed)
            params.append(
                self.vllm.SamplingParams(
                    n=1,
                    temperature=max(sampling.temperature, 0.0),
                    top_p=sampling.top_p,
                    top_k=max(sampling.top_k, 0),  # 0: off (vLLM 0.22 accepts -1 but prefers 0)
                    max_tokens=req.max_tokens,
                    stop=list(sampling.stop_strings),
                    include_stop_str_in_output=True,
                    stop_token_ids=list(sampling.eos_token_ids),
                    # top-k log-probs at every generated position (vLLM cannot limit them to the first
                    # `entropy_tokens` the branching rule reads), in vLLM's flat container: a constant number of
                    # Python objects per request instead of a dict of k + 1 `Logprob`s per position
                    # (benchmarks/bench_vllm_logprobs_cpu.py); without entropy only the sampled token's log-prob (0),
                    # the behaviour log-prob the off-policy correction reads (docs/algorithms.md §13)
                    logprobs=sampling.entropy_topk if sampling.entropy_tokens > 0 else 0,
                    flat_logprobs=True,
                    skip_special_tokens=False,
                    **extra,
                )
            )
            index.append(i)
        if not prompts:
            return results
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        eos = set(sampling.eos_token_ids)
        for i, out in zip(index, outputs):
            completion = out.outputs[0]
            token_ids = list(completion.token_ids)
            # by index: vLLM's `FlatLogprobs` returns one position's {token_id: Logprob} dict per index (its slice of
            # zero positions raises), a plain list does the same
            logprobs = completion.logprobs or ()
            terms = [
                logprob_dict_entropy_term(logprobs[j]) for j in range(min(len(logprobs), sampling.entropy_tokens))
            ]
            stop_reason = getattr(completion, "stop_reason", None)
            if completion.finish_reason == "stop" and isinstance(stop_reason, str):
                reason, stop = "stop", stop_reason
            elif token_ids and token_ids[-1] in eos:
                reason, stop = "eos", None
            elif completion.finish_reason == "stop" and isinstance(stop_reason, int):
                # a stop token id: vLLM keeps it in `token_ids`; make sure it is the last token (mask 1)
                if not token_ids or token_ids[-1] != stop_reason:
                    token_ids.append(stop_reason)
                reason, stop = "eos", None
            else:
                reason, stop = "length", None
            results[i] = GenerationResult(
                token_ids=token_ids,
                entropy_terms=terms,
                finish_reason=reason,
                stop_string=stop,
                logprobs=sampled_logprobs(token_ids, logprobs),
                weight_version=self.weight_version,
            )
        return results
