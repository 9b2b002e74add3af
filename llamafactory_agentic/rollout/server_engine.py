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

r"""`vllm_server` rollout backend: generation through vLLM's own OpenAI-compatible server, weights pushed to it.

The server runs in a process of its own (`vllm serve`, started by the user or by `llamafactory-agentic rollout-server`,
`rollout/server_launch.py`), on GPUs of its own or on a memory fraction of the trainer's GPU (docs/scaling.md,
"Rollout on a vLLM server"). Written against vLLM 0.22.1 (read from its wheel: `entrypoints/serve/rlhf/api_router.py`,
`distributed/weight_transfer/{nccl,ipc}_engine.py`, `v1/worker/gpu_worker.py`).

Generation (`VLLMServerEngine`, built on the evaluation's `rollout.endpoint.OpenAICompletionsEngine`: deadlines,
byte bounds, retries and several servers come from there): `POST /v1/completions` with the context as token ids,
`return_token_ids: true`, `logprobs: k` (k = `arpo_entropy_topk` when the branching rule reads entropies, else 0) and
`return_tokens_as_token_ids: true`, so each position's top-k entries are keyed `token_id:<id>` (token strings can
collide). The sampled token's `token_logprobs` entry is the behaviour log-prob of `GenerationResult.logprobs`; the
top-k entries of the first `arpo_entropy_tokens` positions give the round entropy (`branching.
logprob_dict_entropy_term`, as the colocated `vllm` engine). The server must run with `--logprobs-mode
processed_logprobs`: its log-probs are then those of the distribution sampled from (after temperature, top-k and
top-p), i.e. `log_softmax(z / T)[y]` at the training defaults top-p 1 and top-k 0 (docs/algorithms.md §13.1); vLLM's
default `raw_logprobs` would give the untempered model's. ARPO's branches are requests whose prompt is the source
trajectory's context: vLLM's prefix cache (on by default in vLLM's V1 engine, `--enable-prefix-caching`) computes the
shared prefix once; requests of one prompt go to the same server when there are several.

Weights (`ServerWeightPusher`, after each optimiser step that a rollout reads, with the version): the merged
base-model tensors of `weight_sync.push_weights` (LoRA merged per layer, never an adapter; ZeRO-3 gathered per
module), in the server's dtype, over one of three transports:

* `nccl` - vLLM's weight-transfer engine, NCCL broadcast from the trainer (rank 0 of a group with the server's
  workers; `--weight-transfer-config '{"backend":"nccl"}'`): the server on GPUs of its own. HTTP `POST
  /init_weight_transfer_engine` (once) runs beside vLLM's `NCCLWeightTransferEngine.trainer_init`; each push is
  `POST /start_weight_update`, `POST /update_weights` (names, dtypes, shapes) beside `trainer_send_weights`,
  `POST /finish_weight_update`.
* `ipc` - the same engine over CUDA IPC (`{"backend":"ipc"}`): the server on the trainer's GPU (NCCL refuses two ranks
  on one GPU). Each unit's tensors are handed over as CUDA IPC handles (vLLM's `IPCWeightTransferEngine.
  trainer_send_weights` with a send function that posts `/update_weights` here); the server needs
  `VLLM_ALLOW_INSECURE_SERIALIZATION=1` (it unpickles the handles) and vLLM's IPC engine imports `ray`.
* `disk` - vLLM's `reload_weights` worker call (`POST /collective_rpc`): the tensors are written as safetensors to a
  folder the server reads (`arpo_server_weight_dir`), for servers without a weight-transfer config or out of NCCL's
  reach. Costs a file write and read per step.

Every push ends with `POST /reset_prefix_cache` (no KV row of old weights is reused). The routes above exist only
when the server runs with `VLLM_SERVER_DEV_MODE=1`. The version travels as the query parameter `weight_version` of
`/start_weight_update` (or `/collective_rpc`), which vLLM ignores and its access log shows.
"""

import base64
import contextlib
import math
import os
import pickle
import shutil
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

from ..common.log import get_logger
from .endpoint import EndpointError, OpenAICompletionsEngine
from .engine import VLLM_SERVER_CAPABILITIES, GenerationRequest, GenerationResult, SamplingSettings
from .weight_sync import GatherFn, current_group, push_weights, weight_units, zero3_partitioned


logger = get_logger(__name__)

LOGPROBS_MODE = "processed_logprobs"
TRANSPORTS = ("nccl", "ipc", "disk")
DEV_MODE_HINT = (
    "start the server with VLLM_SERVER_DEV_MODE=1 (vLLM registers its weight-update routes /init_weight_transfer_engine, "
    "/update_weights, /collective_rpc, /reset_prefix_cache and /server_info only then); "
    "`llamafactory-agentic rollout-server` does"
)


class ServerSetupError(EndpointError):
    r"""The rollout server cannot serve training as started (missing flag, other model); the message names the fix."""


def root_url(url: str) -> str:
    r"""`http://host:port` of a server URL given with or without `/v1`."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


class ServerWeightPusher:
    r"""Pushes a policy's weights into one or more vLLM servers (module docstring: transports and routes).

    Args:
        client: The `OpenAICompletionsEngine` whose HTTP client and deadline the control calls use.
        roots: The servers' root URLs (no `/v1`).
        transport: `nccl`, `ipc` or `disk`.
        dtype: The servers' weight dtype as a torch dtype name (`bfloat16`); tensors are cast to it before sending.
        weight_dir: `disk`: the folder the servers read (one sub-folder per version, the previous one removed).
        timeout_s: Seconds for each control call and for a whole transfer.
        nccl_host: `nccl`: the trainer's address as the servers reach it (the rendezvous of the group).

    Raises:
        ValueError: unknown transport, or `disk` without `weight_dir`.
    """

    def __init__(
        self,
        client: OpenAICompletionsEngine,
        roots: Sequence[str],
        transport: str,
        dtype: str | None,
        weight_dir: str | None,
        timeout_s: float,
        nccl_host: str = "127.0.0.1",
    ) -> None:
        r"""See the class docstring."""
        if transport not in TRANSPORTS:
            raise ValueError(
                f"arpo_server_weight_transfer must be one of auto, {', '.join(TRANSPORTS)}; got {transport!r}"
            )
        if transport == "disk" and not weight_dir:
            raise ValueError("the disk weight transfer needs arpo_server_weight_dir (a folder the server can read)")
        self.client, self.roots, self.transport = client, list(roots), transport
        self.dtype, self.weight_dir, self.timeout_s, self.nccl_host = dtype, weight_dir, float(timeout_s), nccl_host
        self.groups: dict[str, Any] = {}  # nccl: root -> the trainer's PyNcclCommunicator
        self.pushes: list[dict[str, Any]] = []  # one entry per push: version, tensors, bytes, seconds

    # ---------------------------------------------------------------------------------------------- HTTP
    def call(self, method: str, root: str, path: str, json: Any = None, params: Any = None) -> httpx.Response:
        r"""One control request (deadline `timeout_s`); raises `httpx.HTTPStatusError` on an error status."""
        from ..common import outbound

        fetched = outbound.fetch(self.client._client, method, root + path, json=json, params=params,
                                 deadline_s=self.timeout_s, max_bytes=1 << 20)  # fmt: skip
        response = fetched.response()
        if response.status_code == 404:
            raise ServerSetupError(f"{root}{path} answers HTTP 404: {DEV_MODE_HINT}")
        response.raise_for_status()
        return response

    # ---------------------------------------------------------------------------------------------- tensors
    def _cast(self, tensor: Any) -> Any:
        import torch

        out = tensor.detach()
        if self.dtype and out.is_floating_point():
            out = out.to(getattr(torch, self.dtype))
        return out.contiguous()

    def metadata(self, model: Any) -> tuple[list[str], list[str], list[list[int]]]:
        r"""Names, dtype names and shapes of every tensor `push_weights` sends, in its order (no gathering)."""
        names, dtypes, shapes = [], [], []
        for unit in weight_units(model):
            for name, param in unit.params:
                names.append(f"{unit.prefix}.{name}" if unit.prefix else name)
                dtype = self.dtype if (self.dtype and param.is_floating_point()) else str(param.dtype).split(".")[-1]
                dtypes.append(dtype)
                shapes.append([int(s) for s in getattr(param, "ds_shape", param.shape)])
        return names, dtypes, shapes

    # ---------------------------------------------------------------------------------------------- push
    def push(self, model: Any, version: int, gather: GatherFn | None = None) -> dict[str, Any]:
        r"""Send `model`'s merged base weights to every server as `version`; every rank calls it (ZeRO-3 gathers).

        Only the main process (rank 0, or no process group) sends; the others walk the same units when the gathers are
        collectives (ZeRO-3, or a `gather` of the caller's; otherwise they leave the module untouched) and wait at a
        barrier (on `weight_sync.current_group()`: an asynchronous producer's own group), so no rank generates before
        the servers hold the new weights.

        Returns:
            `{"version", "tensors", "bytes", "seconds", "transport"}` of this push (main process; zeros elsewhere).

        Raises:
            ServerSetupError: a server lacks a route (dev mode off) or a weight-transfer config for `nccl`/`ipc`.
            httpx.HTTPError: a control call failed.
        """
        import torch.distributed as dist

        distributed = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        main = not distributed or dist.get_rank() == 0
        start = time.perf_counter()
        sent = {"tensors": 0, "bytes": 0}
        if not main:
            # the default gather is a collective only under ZeRO-3; a caller's own gather may always be one
            if gather is not None or zero3_partitioned(model.parameters()):
                push_weights(model, lambda tensors: None, gather=gather)
        elif self.transport == "disk":
            self._push_disk(model, version, gather, sent)
        else:
            for root in self.roots:
                self.call("POST", root, "/start_weight_update", json={"is_checkpoint_format": True},
                          params={"weight_version": version})  # fmt: skip
            if self.transport == "nccl":
                self._push_nccl(model, gather, sent)
            else:
                self._push_ipc(model, gather, sent)
            for root in self.roots:
                self.call("POST", root, "/finish_weight_update")
        if main:
            for root in self.roots:
                self.call("POST", root, "/reset_prefix_cache")
        if distributed:
            dist.barrier(group=current_group())  # the producer thread's own group under rl_max_staleness > 0
        record = {"version": int(version), **sent, "seconds": time.perf_counter() - start, "transport": self.transport}
        if main:
            self.pushes.append(record)
            logger.info(
                "[agentic] weights version %d pushed to %s over %s: %d tensors, %.1f MB in %.2f s",
                version, ", ".join(self.roots), self.transport, sent["tensors"], sent["bytes"] / 1e6,
                record["seconds"],
            )  # fmt: skip
        return record

    def _push_disk(self, model: Any, version: int, gather: GatherFn | None, sent: dict[str, int]) -> None:
        from safetensors.torch import save_file

        tensors: dict[str, Any] = {}

        def collect(pairs: list[tuple[str, Any]]) -> None:
            for name, tensor in pairs:
                tensors[name] = self._cast(tensor).to("cpu", copy=True)

        push_weights(model, collect, gather=gather)
        folder = os.path.join(self.weight_dir, f"version-{int(version)}")
        os.makedirs(folder, exist_ok=True)
        save_file(tensors, os.path.join(folder, "model.safetensors"))
        sent["tensors"] = len(tensors)
        sent["bytes"] = sum(t.numel() * t.element_size() for t in tensors.values())
        for root in self.roots:
            self.call("POST", root, "/collective_rpc",
                      json={"method": "reload_weights", "kwargs": {"weights_path": folder}},
                      params={"weight_version": version})  # fmt: skip
        for old in os.listdir(self.weight_dir):  # the servers hold these weights now: earlier versions go
            if old.startswith("version-") and old != os.path.basename(folder):
                shutil.rmtree(os.path.join(self.weight_dir, old), ignore_errors=True)

    def _world_size(self, root: str) -> int:
        return int(self.call("GET", root, "/get_world_size").json()["world_size"])

    def _init_nccl(self) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        for root in self.roots:
            if root in self.groups:
                continue
            world = 1 + self._world_size(root)
            info = {
                "master_address": self.nccl_host,
                "master_port": _free_port(),
                "rank_offset": 1,
                "world_size": world,
            }
            failure: list[BaseException] = []

            def init_server(root: str = root, info: dict = info) -> None:
                try:
                    self.call("POST", root, "/init_weight_transfer_engine", json={"init_info": info})
                except BaseException as err:  # handed to the caller below
                    failure.append(err)

            thread = threading.Thread(target=init_server, daemon=True)
            thread.start()
            self.groups[root] = NCCLWeightTransferEngine.trainer_init(info)
            thread.join(self.timeout_s)
            if failure:
                raise failure[0]
            logger.info("[agentic] NCCL weight-transfer group with %s: %d ranks at %s:%d", root, world,
                        self.nccl_host, info["master_port"])  # fmt: skip

    def _push_nccl(self, model: Any, gather: GatherFn | None, sent: dict[str, int]) -> None:
        import torch
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        self._init_nccl()
        names, dtypes, shapes = self.metadata(model)
        update = {"update_info": {"names": names, "dtype_names": dtypes, "shapes": shapes, "packed": False}}
        failure: list[BaseException] = []
        threads = []
        for root in self.roots:  # each server receives while the trainer broadcasts

            def receive(root: str = root) -> None:
                try:
                    self.call("POST", root, "/update_weights", json=update)
                except BaseException as err:
                    failure.append(err)

            threads.append(threading.Thread(target=receive, daemon=True))
            threads[-1].start()

        def send(pairs: list[tuple[str, Any]]) -> None:
            for _, tensor in pairs:
                out = self._cast(tensor)
                for group in self.groups.values():  # broadcast on the current stream: done before the unit's
                    # gather/merge context gives its tensors back (vLLM's non-packed path)
                    NCCLWeightTransferEngine.trainer_send_weights(
                        iter([("", out)]), {"group": group, "packed": False, "stream": torch.cuda.current_stream()}
                    )
                sent["tensors"] += 1
                sent["bytes"] += out.numel() * out.element_size()

        push_weights(model, send, gather=gather)
        for thread in threads:
            thread.join(self.timeout_s)
        if failure:
            raise failure[0]

    def _push_ipc(self, model: Any, gather: GatherFn | None, sent: dict[str, int]) -> None:
        from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferEngine

        def post(update_info: Any) -> None:  # vLLM's HTTP form of an IPC update: the handles pickled, base64
            body = {
                "names": update_info.names,
                "dtype_names": update_info.dtype_names,
                "shapes": update_info.shapes,
                "packed": bool(update_info.packed),
                "ipc_handles_pickled": base64.b64encode(pickle.dumps(update_info.ipc_handles)).decode("ascii"),
            }
            if update_info.tensor_sizes is not None:
                body["tensor_sizes"] = update_info.tensor_sizes
            for root in self.roots:
                self.call("POST", root, "/update_weights", json={"update_info": body})

        def send(pairs: list[tuple[str, Any]]) -> None:
            # one unit at a time, inside its gather/merge context: the server has copied the tensors when
            # /update_weights answers, so the merged or gathered tensors may go afterwards
            tensors = [(name, self._cast(tensor)) for name, tensor in pairs]
            IPCWeightTransferEngine.trainer_send_weights(iter(tensors), {"send_mode": post, "packed": False})
            sent["tensors"] += len(tensors)
            sent["bytes"] += sum(t.numel() * t.element_size() for _, t in tensors)

        push_weights(model, send, gather=gather)


class VLLMServerEngine(OpenAICompletionsEngine):
    r"""Round generation on vLLM servers, with behaviour log-probs, entropy terms and weight pushes (module docstring).

    Args:
        model: The policy (its weights are pushed at once, version 0 unless `weight_version` is set before).
        tokenizer: The policy's tokenizer (checked against the server's).
        base_urls: Server URLs (`http://host:port` or `.../v1`).
        api_key: Bearer token of the server (`--api-key`), None: none.
        timeout_s: Seconds per request, whole (generation and control calls; `arpo_server_timeout`).
        weight_transfer: `auto` (the server's `--weight-transfer-config` backend, `disk` without one), `nccl`,
            `ipc` or `disk`.
        weight_dir: The `disk` transport's folder.
        max_model_len: Prompt plus response tokens the run needs (checked against the server's).
        entropy_topk: k of the top-k log-probs asked for when entropies are read (`arpo_entropy_topk`).
        gather: Gather context for ZeRO-3 parameters (default: `weight_sync.zero3_gather`).
        workers: Concurrent requests.
        retries: Attempts per generation request.

    Raises:
        EndpointError: a server cannot be reached (the message names the URL and how to start one).
        ServerSetupError: a server serves another model, or runs without a flag training needs (message names it).
    """

    capabilities = VLLM_SERVER_CAPABILITIES
    UNREACHABLE_HINT = (
        "start it (`llamafactory-agentic rollout-server --model MODEL`, docs/scaling.md) or fix arpo_server_urls"
    )

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        base_urls: Sequence[str],
        *,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        weight_transfer: str = "auto",
        weight_dir: str | None = None,
        max_model_len: int | None = None,
        entropy_topk: int = 10,
        gather: GatherFn | None = None,
        workers: int = 64,
        retries: int = 3,
    ) -> None:
        r"""Check the servers, then push the policy's weights (arguments in the class docstring)."""
        roots = [root_url(u) for u in base_urls if u and u.strip()]
        if not roots:
            raise ValueError(
                "arpo_rollout_backend: vllm_server needs arpo_server_urls (e.g. http://127.0.0.1:8000/v1)"
            )
        self.roots = roots
        self._prefer = threading.local()
        super().__init__([r + "/v1" for r in roots], tokenizer, api_key=api_key, timeout_s=timeout_s,
                         retries=retries, workers=workers, check=True)  # fmt: skip
        # the parent keeps what `check_endpoints` found under `capabilities`: the engine's own declaration wins
        self.endpoint_info, self.capabilities = self.capabilities, VLLM_SERVER_CAPABILITIES
        self.entropy_topk = int(entropy_topk)
        self.server_config = self.check_training_server(max_model_len)
        dtype = self.server_config.get("dtype")
        backend = self.server_config.get("weight_transfer")
        transport = weight_transfer if weight_transfer != "auto" else (backend or "disk")
        if transport in ("nccl", "ipc") and backend != transport and self.server_config.get("known", True):
            raise ServerSetupError(
                f'{roots[0]} runs without --weight-transfer-config \'{{"backend":"{transport}"}}\' (it has '
                f"{backend or 'none'}); restart it with that flag or set arpo_server_weight_transfer to "
                f"{backend or 'disk'}"
            )
        self.pusher = ServerWeightPusher(self, roots, transport, dtype, weight_dir, timeout_s)
        self.gather = gather
        self.model_module = None
        self.set_model(model)

    # ---------------------------------------------------------------------------------------------- checks
    def check_training_server(self, max_model_len: int | None) -> dict[str, Any]:
        r"""What training needs of each server beyond generation; returns `{dtype, weight_transfer, max_model_len}`.

        Checks: the served model's tokenizer encodes like the policy's (`POST /tokenize`), the server's context is
        long enough, `--logprobs-mode processed_logprobs`, `--max-logprobs` >= k, and the dev-mode routes
        (`GET /server_info`, which also gives the weight-transfer backend and the dtype).

        Raises:
            ServerSetupError: naming the server, what is wrong and the flag that fixes it.
        """
        from ..common import outbound

        found: dict[str, Any] = {}
        probe_text = "Hello world: 1 + 2 = 3"
        probe_ids = [int(t) for t in self.tokenizer.encode(probe_text, add_special_tokens=False)]
        for root in self.roots:
            response = outbound.fetch(self._client, "POST", root + "/tokenize",
                                      json={"model": self.model, "prompt": probe_text, "add_special_tokens": False},
                                      deadline_s=self.timeout_s, max_bytes=1 << 20).response()  # fmt: skip
            if response.is_success and [int(t) for t in response.json().get("tokens", [])] != probe_ids:
                raise ServerSetupError(
                    f"{root} serves {self.model!r}, whose tokenizer encodes text differently from the policy's: it "
                    "serves another model. Start it on the policy's model_name_or_path."
                )
            response = outbound.fetch(self._client, "GET", root + "/server_info",
                                      params={"config_format": "json"}, deadline_s=self.timeout_s,
                                      max_bytes=16 << 20).response()  # fmt: skip
            if response.status_code == 404:
                raise ServerSetupError(f"{root}/server_info answers HTTP 404: {DEV_MODE_HINT}")
            if not response.is_success:  # the routes exist (dev mode) but the config could not be read: go on
                logger.warning("[agentic] %s/server_info answers HTTP %d: its flags are not checked (%s)", root,
                               response.status_code, response.text[:200])  # fmt: skip
                found = {"dtype": None, "weight_transfer": None, "max_model_len": None, "known": False}
                continue
            config = response.json().get("vllm_config") or {}
            model_config = config.get("model_config") or {}
            mode = model_config.get("logprobs_mode")
            if mode != LOGPROBS_MODE:
                raise ServerSetupError(
                    f"{root} runs with logprobs mode {mode!r}: training needs the log-probs of the distribution "
                    f"sampled from; restart it with --logprobs-mode {LOGPROBS_MODE}"
                )
            most = model_config.get("max_logprobs")
            if most is not None and 0 <= int(most) < self.entropy_topk:
                raise ServerSetupError(
                    f"{root} returns at most {most} log-probs per position; the entropy needs {self.entropy_topk} "
                    f"(arpo_entropy_topk): restart it with --max-logprobs {self.entropy_topk}"
                )
            length = model_config.get("max_model_len")
            if max_model_len and length is not None and int(length) < int(max_model_len):
                raise ServerSetupError(
                    f"{root} serves contexts of {length} tokens; the run needs {max_model_len} (arpo_max_prompt_length "
                    f"+ arpo_max_response_length): restart it with --max-model-len {max_model_len}"
                )
            cache = (config.get("cache_config") or {}).get("enable_prefix_caching")
            if cache is False:
                logger.warning("[agentic] %s runs without prefix caching: ARPO's branches recompute their prefix "
                               "(start it with --enable-prefix-caching)", root)  # fmt: skip
            transfer = config.get("weight_transfer_config") or {}
            info = {
                "dtype": str(model_config.get("dtype") or "").replace("torch.", "") or None,
                "weight_transfer": transfer.get("backend") if isinstance(transfer, dict) else None,
                "max_model_len": length,
                "known": True,
            }
            if found.get("known") and info["weight_transfer"] != found["weight_transfer"]:
                raise ServerSetupError(f"the servers run different weight-transfer backends ({self.roots})")
            found = info
        return found

    # ---------------------------------------------------------------------------------------------- weights
    def set_model(self, model: Any) -> None:
        r"""Push `model`'s weights to every server as version `weight_version` (after an optimiser step)."""
        self.model_module = model
        if model is not None:
            self.pusher.push(model, self.weight_version, gather=self.gather)

    # ---------------------------------------------------------------------------------------------- requests
    def _body(self, req: GenerationRequest, sampling: SamplingSettings) -> dict[str, Any]:
        body = super()._body(req, sampling)
        body["logprobs"] = self.entropy_topk if sampling.entropy_tokens > 0 else 0
        body["return_tokens_as_token_ids"] = True
        return body

    def _one(self, req: GenerationRequest, sampling: SamplingSettings) -> GenerationResult:
        # the requests of one prompt (a group and its branches) go to one server: its prefix cache holds the prefix
        self._prefer.url = self.urls[hash(tuple(int(t) for t in req.prompt_ids)) % len(self.urls)]
        return super()._one(req, sampling)

    def _pick(self, avoid: Sequence[str] = ()) -> str:
        preferred = getattr(self._prefer, "url", None)
        now = time.monotonic()
        with self._lock:
            if preferred is not None and preferred not in avoid and self._down_until[preferred] <= now:
                self._inflight[preferred] += 1
                return preferred
        return super()._pick(avoid)

    def _parse(self, data: dict[str, Any], sampling: SamplingSettings) -> GenerationResult:
        choice = data["choices"][0]
        if choice.get("token_ids") is None:
            raise ValueError("the server returned no token ids (vLLM >= 0.10.2 with return_token_ids)")
        result = super()._parse(data, sampling)
        block = choice.get("logprobs") or {}
        values = block.get("token_logprobs") or []
        tops = block.get("top_logprobs") or []
        result.logprobs = [
            float(values[j]) if j < len(values) and values[j] is not None else math.nan
            for j in range(len(result.token_ids))
        ]
        result.entropy_terms = [_entropy_term(tops[j]) for j in range(min(len(tops), sampling.entropy_tokens))]
        result.weight_version = self.weight_version
        return result

    def close(self) -> None:
        r"""Close the HTTP client and the worker threads (the servers keep running)."""
        with contextlib.suppress(Exception):
            super().close()


def _entropy_term(top: dict[str, float] | None) -> float:
    from .branching import logprob_dict_entropy_term

    return logprob_dict_entropy_term(top or {})


def build_server_engine(model: Any, tokenizer: Any, config: Any, **kwargs: Any) -> VLLMServerEngine:
    r"""The `vllm_server` engine from a `RolloutConfig` (`server_*` fields, `arpo_server_*` keys)."""
    kwargs.setdefault("api_key", config.server_api_key)
    kwargs.setdefault("timeout_s", config.server_timeout_s)
    kwargs.setdefault("weight_transfer", config.server_weight_transfer)
    kwargs.setdefault("weight_dir", config.server_weight_dir)
    kwargs.setdefault("max_model_len", config.max_prompt_length + config.max_response_length)
    kwargs.setdefault("entropy_topk", config.entropy_topk)
    return VLLMServerEngine(model, tokenizer, list(config.server_urls or ()), **kwargs)
