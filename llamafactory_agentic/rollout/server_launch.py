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

r"""`llamafactory-agentic rollout-server`: start vLLM's server as the `vllm_server` rollout backend needs it.

It prints the exact environment and `vllm serve ...` line, then runs it (replacing itself with it: signals and the
exit status are vLLM's). What training needs of the server (`rollout/server_engine.py`, docs/scaling.md "Rollout on a
vLLM server"):

* `VLLM_SERVER_DEV_MODE=1`: vLLM registers its weight-update routes only then;
* `--logprobs-mode processed_logprobs`: the returned log-probs are those of the distribution sampled from;
* `--max-logprobs` >= `arpo_entropy_topk`; `--enable-prefix-caching` (ARPO's branches share their prefix);
* `--weight-transfer-config '{"backend": "nccl"}'` on GPUs of its own (`--gpus 6,7`: `CUDA_VISIBLE_DEVICES`), or
  `ipc` on the trainer's GPU (`--gpu-memory-utilization 0.3`: a memory fraction of it; the IPC payload is pickled,
  so `VLLM_ALLOW_INSECURE_SERIALIZATION=1` is set);
* `--max-model-len` = `arpo_max_prompt_length + arpo_max_response_length` at least.
"""

import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from typing import Any


def vllm_serve_command(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    gpus: str | None = None,
    gpu_memory_utilization: float | None = None,
    transfer: str = "auto",
    max_model_len: int | None = None,
    max_logprobs: int = 20,
    dtype: str = "bfloat16",
    served_model_name: str | None = None,
    api_key: str | None = None,
    extra: Sequence[str] = (),
) -> tuple[list[str], dict[str, str]]:
    r"""The `vllm serve` argument list and the environment variables it needs.

    Args:
        model: The policy's `model_name_or_path` (the server starts from it; training pushes its weights afterwards).
        host: Address to listen on (`0.0.0.0` for trainers on other hosts).
        port: Port.
        gpus: GPUs of its own (`CUDA_VISIBLE_DEVICES`, e.g. `6,7`; tensor parallel over them); None: the current
            visible GPUs (on the trainer's GPU give `gpu_memory_utilization`).
        gpu_memory_utilization: Share of each GPU's memory vLLM takes (None: vLLM's default, 0.9).
        transfer: `nccl`, `ipc`, `none` (the `disk` transfer needs no engine) or `auto` (`nccl` with `gpus`,
            else `ipc`).
        max_model_len: Context length (prompt + response).
        max_logprobs: Most log-probs per position (>= `arpo_entropy_topk`).
        dtype: Weight dtype.
        served_model_name: Name under `/v1/models` (None: `model`).
        api_key: `--api-key` (None: none).
        extra: More `vllm serve` arguments, appended as given.

    Returns:
        `(argv, env)`: the command and the variables to set (only those this command adds).

    Raises:
        ValueError: an unknown transfer.
    """
    if transfer == "auto":
        transfer = "nccl" if gpus else "ipc"
    if transfer not in ("nccl", "ipc", "none"):
        raise ValueError(f"--transfer must be auto, nccl, ipc or none, got {transfer!r}")
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    if transfer == "ipc":
        env["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"
    argv = ["vllm", "serve", model, "--host", host, "--port", str(int(port)), "--dtype", dtype,
            "--enable-prefix-caching", "--logprobs-mode", "processed_logprobs",
            "--max-logprobs", str(int(max_logprobs))]  # fmt: skip
    if gpus and len([g for g in gpus.split(",") if g.strip()]) > 1:
        argv += ["--tensor-parallel-size", str(len([g for g in gpus.split(",") if g.strip()]))]
    if gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(float(gpu_memory_utilization))]
    if max_model_len:
        argv += ["--max-model-len", str(int(max_model_len))]
    if transfer != "none":
        argv += ["--weight-transfer-config", json.dumps({"backend": transfer})]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if api_key:
        argv += ["--api-key", api_key]
    return argv + list(extra), env


FASTAPI_HINT = (
    "this environment's FastAPI ({fastapi}) routes included routers through `_IncludedRouter`, which "
    "prometheus-fastapi-instrumentator {instrumentator} (vLLM's server, for /metrics) cannot read: every request of "
    "`vllm serve` then fails with \"'_IncludedRouter' object has no attribute 'path'\" (seen on an H200 with fastapi "
    "0.163.2 and the instrumentator 7.1.0). Install `pip install fastapi==0.136.3` (constraints.txt's pin: the newest "
    "release without them; the instrumentator 8.0.2+ reads them but needs starlette>=1.0, which LLaMA-Factory's gradio "
    "refuses) in the server's environment, or pass --ignore-fastapi"
)
FIXED_INSTRUMENTATOR = (8, 0, 2)  # the first prometheus-fastapi-instrumentator that reads `_IncludedRouter` routes


def fastapi_breaks_vllm_server() -> tuple[str, str] | None:
    r"""`(fastapi version, instrumentator version)` when vLLM's server would fail every request, else None.

    The pair fails when FastAPI has `_IncludedRouter` routes (0.137.0 and later) and prometheus-fastapi-instrumentator
    is older than 8.0.2 (vLLM 0.22.1 asks for >= 7.0.0). Without FastAPI or the instrumentator there is nothing to say
    here (vLLM's own import error is clearer).
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        import fastapi.routing

        instrumentator = version("prometheus-fastapi-instrumentator")
    except (ImportError, PackageNotFoundError):
        return None
    parts = tuple(int(p) for p in instrumentator.split(".")[:3] if p.isdigit())
    if hasattr(fastapi.routing, "_IncludedRouter") and parts < FIXED_INSTRUMENTATOR:
        return fastapi.__version__, instrumentator
    return None


def format_command(argv: Sequence[str], env: dict[str, str]) -> str:
    r"""The shell line: `VAR=value ... vllm serve ...`, quoted so that it can be pasted."""
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.quote(a) for a in argv])


def add_subcommand(subparsers: Any) -> None:
    r"""Register `rollout-server` on the `llamafactory-agentic` parser."""
    p = subparsers.add_parser(
        "rollout-server",
        help="start vLLM's OpenAI-compatible server for arpo_rollout_backend: vllm_server (prints the line it runs)",
        description="Print the exact `vllm serve` line the vllm_server rollout backend needs (dev-mode weight routes, "
        "processed log-probs, prefix caching, the weight-transfer engine), then run it. Anything after `--` goes to "
        "`vllm serve` as it is.",
    )
    p.add_argument("--model", required=True, help="the policy's model_name_or_path")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--gpus", help="GPUs of its own, e.g. 6,7 (CUDA_VISIBLE_DEVICES; weights over NCCL)")
    p.add_argument("--gpu-memory-utilization", type=float,
                   help="share of the GPU's memory for vLLM, e.g. 0.3 beside the trainer on one GPU (weights over IPC)")  # fmt: skip
    p.add_argument("--transfer", default="auto", choices=("auto", "nccl", "ipc", "none"),
                   help="weight-transfer engine: auto = nccl with --gpus, else ipc; none: the disk transfer")  # fmt: skip
    p.add_argument("--max-model-len", type=int, help="arpo_max_prompt_length + arpo_max_response_length at least")
    p.add_argument("--max-logprobs", type=int, default=20, help=">= arpo_entropy_topk")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--served-model-name")
    p.add_argument("--api-key")
    p.add_argument("--dry-run", action="store_true", help="print the line and exit")
    p.add_argument(
        "--ignore-fastapi", action="store_true", help="start although FastAPI's routes break vLLM's metrics"
    )
    p.add_argument("extra", nargs="*", help="more `vllm serve` arguments (after --)")
    p.set_defaults(func=run)


def run(args: Any) -> int:
    r"""Print the `vllm serve` line and replace this process with it (`--dry-run`: print only)."""
    argv, env = vllm_serve_command(
        args.model, host=args.host, port=args.port, gpus=args.gpus, gpu_memory_utilization=args.gpu_memory_utilization,
        transfer=args.transfer, max_model_len=args.max_model_len, max_logprobs=args.max_logprobs, dtype=args.dtype,
        served_model_name=args.served_model_name, api_key=args.api_key, extra=args.extra,
    )  # fmt: skip
    print(format_command(argv, env), flush=True)
    if args.dry_run:
        return 0
    broken = fastapi_breaks_vllm_server()
    if broken and not args.ignore_fastapi:
        print(FASTAPI_HINT.format(fastapi=broken[0], instrumentator=broken[1]), file=sys.stderr)
        return 2
    # next to this interpreter first: a virtual environment's `bin` need not be on PATH
    executable = shutil.which(
        "vllm", path=os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    )
    if executable is None:
        print(
            "vllm is not installed here: `pip install -c constraints.txt llamafactory-agentic[vllm]`", file=sys.stderr
        )
        return 2
    os.execvpe(executable, argv, {**os.environ, **env})
    return 0  # not reached
