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

r"""`llamafactory-agentic plan RECIPE.yaml`: memory, time, search cost and disk of a run, before it starts.

Nothing is loaded but the recipe (and `config.json` when `model_name_or_path` is a local folder): no model weights, no
network. Every figure carries the inputs it came from (recipe key, built-in table, default, measured log). The models
behind the figures (docs/plan.md):

* memory per GPU and phase: `train.arpo.memory.estimate_step_memory` (the table of docs/scaling.md, checked against H200 runs),
  with DeepSpeed ZeRO-2/3 sharding and offload, vLLM's reservation (`arpo_vllm_gpu_memory_utilization` of the card)
  and the usable share of the card used by `benchmarks/memory_table.py` (95% minus 1 GiB);
* time per rollout step: decode (waves of `arpo_hf_generation_batch_size` trajectories; a decode step reads the bf16
  weights and the KV cache at a share of the card's memory bandwidth on a GPU, a measured per-step cost on CPU),
  prefill, tool rounds at the tool's latency, and the update (8 x parameters x trained tokens with gradient
  checkpointing, 6 x without, at a model-FLOPs utilisation of the card's bf16 peak);
* search-API calls: trajectories x search calls per trajectory x (1 - cache hit rate), priced per 1000 calls;
* disk: checkpoints kept (`save_steps`, `save_total_limit`, `save_only_model`) plus the final model.
"""

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..train.arpo.memory import GIB, ModelShape, estimate_step_memory


RL_STAGES = ("arpo", "aepo")
SFT_STAGES = ("agentic_sft", "sft")


class PlanError(ValueError):
    r"""A recipe the planner cannot read; the message names the file, the key and the fix."""


# ---------------------------------------------------------------------------------------------------- tables
# Public architecture hyper-parameters (config.json of each model on the hub); matched against model_name_or_path.
KNOWN_SHAPES: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": dict(hidden=896, intermediate=4864, layers=24, heads=14, kv_heads=2, vocab=151936, tied=True),
    "qwen2.5-1.5b": dict(hidden=1536, intermediate=8960, layers=28, heads=12, kv_heads=2, vocab=151936, tied=True),
    "qwen2.5-3b": dict(hidden=2048, intermediate=11008, layers=36, heads=16, kv_heads=2, vocab=151936, tied=True),
    "qwen2.5-7b": dict(hidden=3584, intermediate=18944, layers=28, heads=28, kv_heads=4, vocab=152064, tied=False),
    "qwen2.5-14b": dict(hidden=5120, intermediate=13824, layers=48, heads=40, kv_heads=8, vocab=152064, tied=False),
    "qwen2.5-32b": dict(hidden=5120, intermediate=27648, layers=64, heads=40, kv_heads=8, vocab=152064, tied=False),
    "qwen3-8b": dict(hidden=4096, intermediate=12288, layers=36, heads=32, kv_heads=8, vocab=151936, tied=False),
    "qwen3-14b": dict(hidden=5120, intermediate=17408, layers=40, heads=40, kv_heads=8, vocab=151936, tied=False),
    "llama3.1-8b": dict(hidden=4096, intermediate=14336, layers=32, heads=32, kv_heads=8, vocab=128256, tied=False),
    # this project's own local models (llamafactory_agentic/testing.py:build_tiny_model, tasks/model.py:MODEL_SIZES)
    "tiny-qwen2": dict(hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2, vocab=1024, tied=True),
    "demo": dict(hidden=128, intermediate=384, layers=2, heads=4, kv_heads=2, vocab=1024, tied=True),
}
# spellings in model names that map to a table key (lower case, `-`, `_` and `.` removed before matching)
_ALIASES = {
    "qwen25": "qwen2.5",
    "llama31": "llama3.1",
    "metallama31": "llama3.1",
}


@dataclass(frozen=True)
class Device:
    r"""What the time and memory models need of an accelerator (vendor data sheets; bf16 dense tensor peak)."""

    name: str
    memory_gib: float  # capacity in GiB
    hbm_bytes_per_s: float
    bf16_flops: float
    kind: str = "gpu"  # `gpu` or `cpu`


GPUS: dict[str, Device] = {
    "h200": Device("NVIDIA H200 141 GB", 141e9 / GIB, 4.8e12, 989e12),
    "h100": Device("NVIDIA H100 80 GB SXM", 80e9 / GIB, 3.35e12, 989e12),
    "a100-80g": Device("NVIDIA A100 80 GB SXM", 80e9 / GIB, 2.039e12, 312e12),
    "a100-40g": Device("NVIDIA A100 40 GB", 40e9 / GIB, 1.555e12, 312e12),
    "l40s": Device("NVIDIA L40S 48 GB", 48e9 / GIB, 0.864e12, 362e12),
    "a10g": Device("NVIDIA A10G 24 GB", 24e9 / GIB, 0.6e12, 125e12),
    "rtx4090": Device("NVIDIA RTX 4090 24 GB", 24e9 / GIB, 1.008e12, 165e12),
}

# what the GPU step-time model was checked against (docs/plan.md, "Prediction against measurement")
GPU_STEP_CHECK = (
    "checked on one H200: Qwen2.5-7B +20%, 0.5B about half the measured time (per-rollout and first-update costs, "
    "low MFU of small models; docs/plan.md)"
)

# Defaults of the time model. Each is printed as the source of the figures it feeds; docs/plan.md says where it came
# from and how well the predictions built on it matched measured runs.
DEFAULTS: dict[str, float] = {
    # share of the HBM bandwidth a decode step reaches (hf engine with CUDA graphs; weights + KV read once per step)
    "decode_bandwidth_efficiency": 0.5,
    # host time per decode step on a GPU (sampling, stop strings, bookkeeping), seconds
    "decode_host_s": 0.004,
    # model-FLOPs utilisation of the update and the prefill on a GPU
    "mfu": 0.35,
    # CPU (2 cores of this project's machines): docs/plan.md "CPU profile". FLOP rate from the packed SFT
    # measurement of docs/tasks.md (4-layer demo model, 16 x 512 tokens in 0.54 s: about 8e10 FLOP/s); host time per
    # micro-batch fitted to the demo's SFT (docs/demo.md: 1000 steps in 214-247 s), host time per decode step fitted to the
    # GRPO runs of benchmarks/results/compare_algorithms/cpu (mean wall 119 s)
    "cpu_flops": 8e10,
    "cpu_update_s": 0.014,
    "cpu_decode_step_s": 0.0099,
    # process start, model and data loading before the first step (seconds; CPU / GPU)
    "startup_cpu_s": 15.0,
    "startup_gpu_s": 120.0,
    # response tokens a trajectory generates, as a share of arpo_max_response_length (observations included)
    "response_fill": 0.5,
    # tool calls per trajectory when the recipe has tools (the demo and the papers' runs: about 1-2)
    "tool_calls_per_traj": 1.5,
    # share of the calls that are searches when both python and search are configured
    "search_share": 0.5,
    # share of a group's M - N places that branches take (the rest are budget fills): 2.1-2.6 of 4 in the ARPO and
    # AEPO runs of benchmarks/results/compare_algorithms/cpu (branches_per_group)
    "branch_share": 0.6,
    # tool latency, seconds: python in its sandbox, local BM25, web search API (p50 of the tools/*/latency_p50_s logs)
    "latency_python_s": 0.3,
    "latency_search_local_s": 0.01,
    "latency_search_web_s": 1.5,
    # expected search-cache hit rate when a cache is configured (0 without)
    "cache_hit_rate": 0.2,
    # SFT: tokens of an average row as a share of cutoff_len
    "sft_fill": 0.5,
}
# price per 1000 search calls by provider, US dollars (published list prices, entry tiers; --search-price-per-1k wins)
SEARCH_PRICE_PER_1K = {"serper": 1.0, "brightdata": 1.5, "web": 1.0, "retriever": 0.0, "local": 0.0, "replay": 0.0}
# rows of the datasets the recipes name (their dataset cards) when the file is not on this machine
KNOWN_DATASET_ROWS = {
    "arpo_rl_reasoning_10k": 10000,
    "arpo_rl_deepsearch_1k": 1000,
    "arpo_sft_54k": 54000,
    "arpo_rl_valid": 300,
}


# ---------------------------------------------------------------------------------------------------- inputs
@dataclass
class Figure:
    r"""One line of the plan: what, its value as text, and where its inputs came from."""

    what: str
    value: str
    source: str


@dataclass
class Plan:
    r"""The planner's result: the figures in print order, plus the numbers tests and callers use."""

    recipe: str
    stage: str
    figures: list[Figure] = field(default_factory=list)
    numbers: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def add(self, what: str, value: str, source: str, key: str | None = None, number: float | None = None) -> None:
        r"""Append a figure; `key`/`number` also store the raw value in `numbers`."""
        self.figures.append(Figure(what, value, source))
        if key is not None and number is not None:
            self.numbers[key] = float(number)

    def format(self) -> str:
        r"""The plan as a plain-text table (one figure per line, its source after it)."""
        width = max((len(f.what) for f in self.figures), default=10)
        vwidth = max((len(f.value) for f in self.figures), default=10)
        lines = [f"plan for {self.recipe} (stage {self.stage})"]
        lines += [f"  {f.what:<{width}}  {f.value:<{vwidth}}  <- {f.source}" for f in self.figures]
        lines += [f"  WARNING: {w}" for w in self.warnings]
        return "\n".join(lines)


def load_recipe(path: str | os.PathLike) -> dict[str, Any]:
    r"""Read a training recipe (YAML mapping with a `stage` key).

    Raises:
        PlanError: missing file, not a mapping, or no `stage` key (e.g. a tool config: it is named by a recipe's
            `agentic_tool_config`, plan that recipe instead).
    """
    path = Path(path)
    if not path.is_file():
        raise PlanError(f"{path}: no such file; pass a training recipe (YAML), e.g. recipes/arpo/*.yaml.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise PlanError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise PlanError(f"{path}: expected a mapping of training keys, got {type(data).__name__}.")
    if "stage" not in data:
        hint = (
            " It looks like a tool config: plan the recipe whose `agentic_tool_config` names it."
            if "tools" in data
            else " Add `stage: arpo|aepo|agentic_sft`."
        )
        raise PlanError(f"{path}: no `stage` key, so this is not a training recipe.{hint}")
    return data


def _normalise(name: str) -> str:
    out = "".join(ch for ch in name.lower() if ch.isalnum())
    for alias, key in _ALIASES.items():
        out = out.replace(alias, key.replace(".", "").replace("-", ""))
    return out


def resolve_shape(recipe: dict[str, Any], base_dir: Path, override: str | None = None) -> tuple[ModelShape, str]:
    r"""The model's shape and where it came from.

    Order: `override` (a `KNOWN_SHAPES` key or a `config.json` path), `config.json` in `model_name_or_path` when that
    is a local folder (relative paths are tried from the working directory and the recipe's folder), else the first
    `KNOWN_SHAPES` name found in `model_name_or_path` (`Qwen/Qwen2.5-7B-Instruct`, `saves/qwen2.5-7b/full/...`).

    Raises:
        PlanError: no shape found; the message lists the known names and the `--model-shape` fix.
    """
    if override:
        if override in KNOWN_SHAPES:
            return ModelShape(**KNOWN_SHAPES[override]), f"--model-shape {override} (built-in table)"
        cfg = Path(override)
        if cfg.is_dir():
            cfg = cfg / "config.json"
        if cfg.is_file():
            return _shape_from_config(cfg), f"--model-shape {cfg}"
        raise PlanError(f"--model-shape {override}: neither a config.json nor one of {', '.join(KNOWN_SHAPES)}.")

    name = str(recipe.get("model_name_or_path") or "")
    if not name:
        raise PlanError("the recipe has no `model_name_or_path`.")
    for candidate in (Path(name), base_dir / name):
        if (candidate / "config.json").is_file():
            return _shape_from_config(candidate / "config.json"), f"{candidate / 'config.json'}"
    norm = _normalise(name)
    best = None
    for key in KNOWN_SHAPES:
        if _normalise(key) in norm and (best is None or len(key) > len(best)):
            best = key
    if best is None and name.strip("./") in ("sft", "model"):
        # the demo's recipes (resources/recipes/synthetic) name its model `model` and its cold start `sft`, relative
        # to the demo's working directory (tasks/demo.py)
        return ModelShape(**KNOWN_SHAPES["demo"]), f"the demo's model (tasks/model.py MODEL_SIZES['demo']; {name!r})"
    if best is None:
        raise PlanError(
            f"model_name_or_path {name!r}: no config.json there and no known shape in the name; pass "
            f"--model-shape with one of {', '.join(KNOWN_SHAPES)} or the path of the model's config.json."
        )
    return ModelShape(**KNOWN_SHAPES[best]), f"built-in table '{best}' (no config.json at {name})"


def _shape_from_config(path: Path) -> ModelShape:
    cfg = json.loads(path.read_text())
    cfg = cfg.get("text_config", cfg)
    heads = cfg["num_attention_heads"]
    return ModelShape(
        hidden=cfg["hidden_size"],
        intermediate=cfg["intermediate_size"],
        layers=cfg["num_hidden_layers"],
        heads=heads,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        vocab=cfg["vocab_size"],
        tied=bool(cfg.get("tie_word_embeddings", False)),
    )


def detect_device(name: str | None, num_gpus: int | None) -> tuple[Device, int, str]:
    r"""(device, GPUs, source): `name` from `GPUS` or `cpu`, else the CUDA device torch sees, else the CPU.

    Raises:
        PlanError: unknown `name`.
    """
    if name:
        key = name.lower()
        if key == "cpu":
            return _cpu_device(), 1, "--gpu cpu"
        if key not in GPUS:
            raise PlanError(f"--gpu {name}: unknown; choose one of {', '.join(GPUS)} or cpu.")
        return GPUS[key], num_gpus or 1, f"--gpu {key}" + (f", --num-gpus {num_gpus}" if num_gpus else "")
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            count = num_gpus or torch.cuda.device_count()
            lowered = props.name.lower()
            for key, dev in GPUS.items():
                if key.split("-")[0] in lowered.replace(" ", ""):
                    dev = dataclasses.replace(dev, name=props.name, memory_gib=props.total_memory / GIB)
                    return dev, count, f"detected {count} x {props.name}"
            return (
                Device(props.name, props.total_memory / GIB, 2e12, 300e12),
                count,
                f"detected {props.name} (bandwidth and FLOPs not in the table: 2 TB/s, 300 TFLOP/s assumed)",
            )
    except Exception:  # no torch or no driver: plan for the CPU
        pass
    return _cpu_device(), 1, "no CUDA device detected (pass --gpu h200|a100-80g|... to plan for a GPU)"


def _cpu_device() -> Device:
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
    except (ValueError, OSError):
        mem = 16.0
    return Device("CPU", mem, 0.0, DEFAULTS["cpu_flops"], kind="cpu")


def _agentic_defaults(recipe: dict[str, Any]) -> dict[str, Any]:
    r"""The recipe over the plugin's defaults and the stage's preset (train/presets.py)."""
    from types import SimpleNamespace

    from ..hparams import AgenticArguments
    from ..train.presets import resolve_presets

    values = {f.name: f.default for f in dataclasses.fields(AgenticArguments) if f.default is not dataclasses.MISSING}
    values.update(recipe)
    if recipe.get("stage") in RL_STAGES:
        ns = SimpleNamespace(**values)
        try:
            resolve_presets(ns, output_dir=None, verbose=False)
        except ValueError as err:
            raise PlanError(str(err)) from err
        values = vars(ns)
    return values


def _dataset_rows(recipe: dict[str, Any], base_dir: Path) -> tuple[int | None, str]:
    names = [n.strip() for n in str(recipe.get("dataset") or "").split(",") if n.strip()]
    total, sources = 0, []
    info_path = None
    for d in (Path(str(recipe.get("dataset_dir", "data"))), base_dir / str(recipe.get("dataset_dir", "data"))):
        if (d / "dataset_info.json").is_file():
            info_path = d / "dataset_info.json"
            break
    info = json.loads(info_path.read_text()) if info_path else {}
    for name in names:
        rows = None
        entry = info.get(name, {})
        file_name = entry.get("file_name")
        if file_name and info_path is not None:
            rows = _count_rows(info_path.parent / file_name)
            if rows is not None:
                sources.append(f"{name}: {rows} rows in {info_path.parent / file_name}")
        if rows is None:
            key = name[: -len("_local")] if name.endswith("_local") else name
            rows = KNOWN_DATASET_ROWS.get(key)
            if rows is not None:
                sources.append(f"{name}: {rows} rows (built-in table, file not here)")
        if rows is None:
            return None, f"{name}: size unknown (file not here, not in the built-in table)"
        total += rows
    max_samples = recipe.get("max_samples")
    if max_samples:
        total = min(total, int(max_samples) * max(len(names), 1))
        sources.append(f"max_samples {max_samples}")
    return total, "; ".join(sources)


def _count_rows(path: Path) -> int | None:
    try:
        if path.is_dir():
            files = sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonl", ".parquet"))
            counts = [_count_rows(p) for p in files]
            return sum(c for c in counts if c) or None
        if path.suffix == ".jsonl":
            with open(path, encoding="utf-8") as f:
                return sum(1 for line in f if line.strip())
        if path.suffix == ".json":
            data = json.loads(path.read_text())
            return len(data) if isinstance(data, list) else None
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.ParquetFile(path).metadata.num_rows
    except (OSError, ValueError, ImportError):
        return None
    return None


def _deepspeed(recipe: dict[str, Any], base_dir: Path) -> tuple[int, bool, bool, str]:
    r"""(ZeRO stage, optimizer offloaded, parameters offloaded, source) of the recipe's `deepspeed` config."""
    ds = recipe.get("deepspeed")
    if not ds:
        return 0, False, False, "no deepspeed"
    if isinstance(ds, dict):  # the parsed config of a running trainer
        cfg = ds.get("zero_optimization", {})
        stage = int(cfg.get("stage", 0)) if str(cfg.get("stage", 0)).isdigit() else 0
        off_opt = (cfg.get("offload_optimizer") or {}).get("device", "none") == "cpu"
        off_par = (cfg.get("offload_param") or {}).get("device", "none") == "cpu"
        return stage, off_opt, off_par, f"deepspeed config (ZeRO-{stage})"
    for p in (Path(str(ds)), base_dir / str(ds)):
        if p.is_file():
            cfg = json.loads(p.read_text()).get("zero_optimization", {})
            stage = int(cfg.get("stage", 0))
            off_opt = (cfg.get("offload_optimizer") or {}).get("device", "none") == "cpu"
            off_par = (cfg.get("offload_param") or {}).get("device", "none") == "cpu"
            return stage, off_opt, off_par, f"{ds} (ZeRO-{stage}{', offload' if off_opt or off_par else ''})"
    stage = 3 if "z3" in str(ds) else 2 if "z2" in str(ds) else 0
    return stage, "offload" in str(ds), "offload" in str(ds), f"{ds} (not found; ZeRO-{stage} read from its name)"


def _tools(values: dict[str, Any], base_dir: Path) -> dict[str, Any]:
    r"""Which tools the run has, the search provider and the cache, from `agentic_tool_config` or the recipe keys."""
    out = {"tools": [], "provider": None, "cache": bool(values.get("agentic_cache_path")), "source": ""}
    cfg_path = values.get("agentic_tool_config")
    if cfg_path:
        for p in (Path(str(cfg_path)), base_dir / str(cfg_path)):
            if p.is_file():
                cfg = yaml.safe_load(p.read_text()) or {}
                for tool in cfg.get("tools", []):
                    out["tools"].append(tool.get("name"))
                    if tool.get("name") == "search":
                        params = tool.get("params") or {}
                        backend = params.get("backend", "web")
                        out["provider"] = params.get("provider", backend) if backend == "web" else backend
                out["cache"] = out["cache"] or bool(cfg.get("cache"))
                out["source"] = str(cfg_path)
                return out
        out["source"] = f"{cfg_path} (not found; python + web search assumed)"
        out["tools"], out["provider"] = ["python", "search"], "web"
        return out
    if values.get("stage") in RL_STAGES:
        out["tools"] = ["python", "search"]
        out["provider"] = values["agentic_search_backend"]
        out["source"] = f"agentic_search_backend: {out['provider']}"
    return out


# ---------------------------------------------------------------------------------------------------- the plan
def _fmt_time(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def make_plan(
    recipe_path: str | os.PathLike,
    gpu: str | None = None,
    num_gpus: int | None = None,
    model_shape: str | None = None,
    measured: dict[str, float] | None = None,
    search_price_per_1k: float | None = None,
    overrides: dict[str, Any] | None = None,
) -> Plan:
    r"""Plan one recipe: memory per phase and GPU, time per step and run, search calls and cost, checkpoint disk.

    Args:
        recipe_path: The training recipe (YAML).
        gpu: A `GPUS` key or `cpu`; None detects the CUDA device (or plans for the CPU).
        num_gpus: Ranks (default: the detected count, or 1).
        model_shape: A `KNOWN_SHAPES` key or a config.json path instead of the recipe's model.
        measured: Values measured by an earlier run (`read_measured`): `response_tokens`, `tool_calls_per_traj`,
            `search_cache_hit_rate`, `latency_<tool>_s`, `decode_step_s`, `fills_per_step`; each replaces its default.
        search_price_per_1k: Dollars per 1000 search calls (default: the provider's in `SEARCH_PRICE_PER_1K`).
        overrides: Recipe keys to replace (as `key=value` on the command line).

    Returns:
        A `Plan` (`numbers` holds `peak_gib`, `rollout_peak_gib`, `loss_peak_gib`, `step_s`, `run_s`, `search_calls`,
        `search_cost_usd`, `disk_gib`, ...).

    Raises:
        PlanError: unreadable recipe, unknown model shape or GPU, or inconsistent batch geometry.
    """
    recipe_path = Path(recipe_path)
    recipe = load_recipe(recipe_path)
    recipe.update(overrides or {})
    base_dir = recipe_path.resolve().parent
    for up in (base_dir, *base_dir.parents):  # paths in recipes are relative to the repository root
        if (up / "recipes").is_dir() or (up / "data" / "dataset_info.json").is_file():
            base_dir = up
            break
    return plan_recipe(recipe, str(recipe_path), base_dir, gpu, num_gpus, model_shape, measured, search_price_per_1k)


def plan_recipe(
    recipe: dict[str, Any],
    label: str,
    base_dir: Path,
    gpu: str | None = None,
    num_gpus: int | None = None,
    model_shape: str | None = None,
    measured: dict[str, float] | None = None,
    search_price_per_1k: float | None = None,
) -> Plan:
    r"""`make_plan` on a recipe already read into a dict (`label` names it; relative paths resolve from `base_dir`)."""
    values = _agentic_defaults(recipe)
    stage = str(values["stage"])
    measured = dict(measured or {})
    plan = Plan(recipe=label, stage=stage)

    shape, shape_src = resolve_shape(recipe, base_dir, model_shape)
    device, world, device_src = detect_device(gpu, num_gpus)
    n_params = shape.params()
    plan.add("model", f"{n_params / 1e9:.2f}B parameters, {shape.layers} layers", shape_src, "params", n_params)
    plan.add("device", f"{world} x {device.name} ({device.memory_gib:.0f} GiB)", device_src, "world", world)

    finetuning = str(values.get("finetuning_type", "lora"))
    lora_rank = int(values.get("lora_rank", 8) or 8)
    fp32_master = (
        finetuning == "full" and not values.get("pure_bf16") and bool(values.get("bf16") or values.get("fp16"))
    )
    gc = not values.get("disable_gradient_checkpointing") and bool(values.get("gradient_checkpointing", True))
    zero, off_opt, off_par, ds_src = _deepspeed(values, base_dir)
    if finetuning == "lora":
        precision = "bf16 base, float32 adapters"
    else:
        precision = "pure_bf16" if values.get("pure_bf16") else ("fp32 master weights" if fp32_master else "float32")
    per_device = int(values.get("per_device_train_batch_size", 1))
    accum = int(values.get("gradient_accumulation_steps", 1))

    if stage in RL_STAGES:
        _plan_rl(plan, values, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par,
                 ds_src, precision, per_device, accum, measured, search_price_per_1k, base_dir)  # fmt: skip
    elif stage in SFT_STAGES:
        _plan_sft(plan, values, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par,
                  ds_src, precision, per_device, accum, base_dir)  # fmt: skip
    else:
        raise PlanError(f"{label}: stage {stage!r} is not planned; plan covers arpo, aepo and agentic_sft.")
    return plan


def _memory(plan: Plan, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par, ds_src,
            precision, context, slots, micro_tokens, chunk, vllm_util, lora_merge, rl: bool,
            prompt_length: int | None = None) -> None:  # fmt: skip
    est = estimate_step_memory(
        shape,
        finetuning=finetuning,
        lora_rank=lora_rank,
        fp32_master=fp32_master,
        context=context,
        slots=slots,
        micro_batch_tokens=micro_tokens,
        gradient_checkpointing=gc,
        chunk_size=chunk,  # 0: the materialising path's full logits (estimated since 2026-12-04; before, as 1024)
        lora_merge=lora_merge,
        prompt_length=prompt_length,
    )
    weights, grads, states = est.weights, est.gradients, est.optimizer_states
    shard = max(world, 1)
    if zero >= 2:
        grads, states = grads / shard, states / shard
    if zero >= 3:
        weights = weights / shard
    if off_opt:
        states = 0.0
    if off_par:
        weights = 0.0
    static = weights + grads + states
    loss_peak = static + est.activations + est.logprob_head
    src = (
        f"train/arpo/memory.py estimate ({finetuning}, {precision}, gradient checkpointing {'on' if gc else 'off'}; "
        f"{ds_src}, {world} rank(s))"
    )
    plan.add("memory: weights + grads + optimizer", f"{static:.1f} GiB per rank", src, "static_gib", static)
    if rl:
        if vllm_util:
            rollout_peak = weights + states + vllm_util * device.memory_gib
            rsrc = f"vLLM reserves arpo_vllm_gpu_memory_utilization {vllm_util} x {device.memory_gib:.0f} GiB"
        else:
            gathered = est.weights - weights if zero >= 3 else 0.0  # ZeRO-3 gathers the weights for generation
            rollout_peak = weights + states + gathered + est.generation_copy + est.kv_cache
            rollout_peak += est.rollout_peak - (
                est.weights + est.optimizer_states + est.generation_copy + est.kv_cache
            )
            # (the last term: the decode step's float32 logits and sampling buffers or the prefill's transients)
            rsrc = (
                f"KV cache {est.kv_cache:.1f} GiB: {slots} slots x {context} tokens (arpo_hf_generation_batch_size); "
                f"prefill transients {est.prefill:.1f} GiB"
            )
        plan.add("memory: rollout peak", f"{rollout_peak:.1f} GiB per rank", rsrc, "rollout_peak_gib", rollout_peak)
    else:
        rollout_peak = 0.0
    plan.add(
        "memory: update peak",
        f"{loss_peak:.1f} GiB per rank",
        f"activations {est.activations:.1f} GiB of a {micro_tokens}-token micro-batch, head {est.logprob_head:.1f} GiB",
        "loss_peak_gib",
        loss_peak,
    )
    peak = max(rollout_peak, loss_peak)
    usable = 0.95 * device.memory_gib - 1.0
    fits = peak <= usable
    where = "host RAM" if device.kind == "cpu" else device.name
    verdict = f"{'fits' if fits else 'DOES NOT FIT'}: {peak:.1f} of {usable:.1f} GiB usable on {where}"
    plan.add(
        "memory: fits", verdict, "usable = 95% of the memory - 1 GiB (benchmarks/memory_table.py)", "peak_gib", peak
    )
    plan.numbers["fits"] = float(fits)
    if not fits:
        plan.warnings.append(
            f"peak {peak:.1f} GiB exceeds {usable:.1f} GiB usable: lower arpo_hf_generation_batch_size / "
            "rl_micro_batch_tokens, use LoRA, pure_bf16, or ZeRO-3 over more GPUs (docs/scaling.md 'One GPU, real sizes')."
        )


def _train_seconds(shape: ModelShape, tokens: float, gc: bool, device: Device, extra_forward: int = 0) -> float:
    r"""Seconds of forward + backward over `tokens` (+ `extra_forward` forward-only passes, e.g. a reference model).

    FLOPs are 2 x (parameters + the tied output head) per token forward, x3 with the backward, x4 with gradient
    checkpointing; at `mfu` of the card's bf16 peak, or at `cpu_flops` on the CPU.
    """
    n = shape.params() + (shape.vocab * shape.hidden if shape.tied else 0)
    flops = (8.0 if gc else 6.0) * n * tokens + 2.0 * n * tokens * extra_forward
    rate = device.bf16_flops * (DEFAULTS["mfu"] if device.kind == "gpu" else 1.0)
    return flops / rate


def _plan_rl(plan, values, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par,
             ds_src, precision, per_device, accum, measured, price, base_dir) -> None:  # fmt: skip
    m = int(values["arpo_rollout_n"])
    prompts = int(values["arpo_rollout_batch_size"])
    prompt_len = int(values["arpo_max_prompt_length"])
    budget = int(values["arpo_max_response_length"])
    backend = str(values["arpo_rollout_backend"])
    trajs = prompts * m
    per_rank = math.ceil(trajs / world)
    update = per_device * accum * world
    if trajs % update:
        raise PlanError(
            f"arpo_rollout_batch_size {prompts} x arpo_rollout_n {m} = {trajs} trajectories is not a multiple of "
            f"per_device_train_batch_size {per_device} x gradient_accumulation_steps {accum} x {world} rank(s)."
        )
    updates_per_rollout = trajs // update
    slots = min(int(values["arpo_hf_generation_batch_size"]), per_rank)
    micro = int(values.get("rl_micro_batch_tokens") or 0) or per_device * (prompt_len + budget)
    vllm_util = float(values["arpo_vllm_gpu_memory_utilization"]) if backend == "vllm" else 0.0
    if device.kind == "cpu":
        vllm_util = 0.0
    plan.add(
        "batch",
        f"{prompts} prompts x M {m} = {trajs} trajectories per rollout, {updates_per_rollout} update(s) of {update}",
        "arpo_rollout_batch_size, arpo_rollout_n, per_device_train_batch_size x gradient_accumulation_steps x ranks",
        "trajectories",
        trajs,
    )
    _memory(plan, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par, ds_src,
            precision, prompt_len + budget, slots, micro, int(values.get("rl_logprob_chunk_size", 1024)), vllm_util,
            str(values["arpo_hf_lora_merge"]), rl=True, prompt_length=prompt_len)  # fmt: skip

    # ---- time per rollout step
    tools = _tools(values, base_dir)
    has_tools = bool(tools["tools"])
    fill = DEFAULTS["response_fill"]
    if "response_tokens" in measured:
        gen, gen_src = measured["response_tokens"], "measured (rollout/response_length)"
    else:
        gen, gen_src = fill * budget, f"default {fill:.0%} of arpo_max_response_length {budget}"
    calls = measured.get("tool_calls_per_traj", DEFAULTS["tool_calls_per_traj"] if has_tools else 0.0)
    calls = min(calls, float(values.get("agentic_max_tool_calls") or calls))
    calls_src = "measured (rollout/tool_calls_per_traj)" if "tool_calls_per_traj" in measured else "default"
    waves = math.ceil(per_rank / slots) if backend == "hf" or device.kind == "cpu" else 1
    wave_rows = min(slots, per_rank) if backend == "hf" or device.kind == "cpu" else per_rank
    # a wave lasts as long as its longest trajectory: budget-bound, about twice the mean when the mean is short
    steps_per_wave = min(float(budget), 2.0 * gen)
    avg_ctx = prompt_len / 2 + gen / 2
    if "decode_step_s" in measured:
        step_s, dec_src = measured["decode_step_s"], "measured decode step (perf/decode_step_ms)"
    elif device.kind == "cpu":
        flops = 2.0 * shape.params() * wave_rows
        step_s = DEFAULTS["cpu_decode_step_s"] + flops / device.bf16_flops
        dec_src = f"CPU profile: {DEFAULTS['cpu_decode_step_s'] * 1e3:.1f} ms + FLOPs at {device.bf16_flops:.0e}/s"
    else:
        bytes_read = 2.0 * shape.params() + wave_rows * avg_ctx * shape.kv_bytes_per_token()
        step_s = bytes_read / (device.hbm_bytes_per_s * DEFAULTS["decode_bandwidth_efficiency"])
        step_s += DEFAULTS["decode_host_s"]
        dec_src = (
            f"weights + KV read at {DEFAULTS['decode_bandwidth_efficiency']:.0%} of "
            f"{device.hbm_bytes_per_s / 1e12:.2f} TB/s + {DEFAULTS['decode_host_s'] * 1e3:.0f} ms host"
        )
    # budget fills (docs/algorithms.md §3.4): a group whose members have all finished gets fresh global rollouts;
    # they start from the prompt after the group's first pass, so they add sequential decode steps. `per_round` adds
    # one fill per round, so a group's fills run one after another, each about a mean trajectory long; `all_at_once`
    # adds them together, one more pass as long as the longest of them.
    initial = int(values.get("arpo_initial_rollouts") or m)
    spare = max(m - initial, 0)
    if "fills_per_step" in measured:
        fills = min(float(spare), measured["fills_per_step"] / max(prompts, 1))
        fill_src = "measured (rollout/fills per prompt)"
    else:
        fills = spare * (1.0 - DEFAULTS["branch_share"])
        fill_src = f"default: branches take {DEFAULTS['branch_share']:.0%} of the {spare} places beside N"
    if str(values.get("arpo_budget_fill") or "per_round") == "all_at_once":
        fill_steps = min(fills, 1.0) * steps_per_wave
    else:
        fill_steps = fills * min(float(budget), gen)
    decode_s = waves * (steps_per_wave + fill_steps) * step_s
    prefill_tokens = per_rank * (prompt_len / 2 + gen / 2 * calls / max(calls, 1.0))
    prefill_s = _train_seconds(shape, prefill_tokens, False, device) / 4.0  # forward only: 2 of 8
    plan.add(
        "time: rollout (decode)",
        f"{_fmt_time(decode_s + prefill_s)} per rollout step",
        f"{waves} wave(s) x ({steps_per_wave:.0f} + {fill_steps:.0f} budget-fill) decode steps x "
        f"{step_s * 1e3:.1f} ms ({dec_src}); {gen:.0f} tokens per trajectory ({gen_src}); {fills:.1f} fills per "
        f"group ({fill_src})",
        "rollout_s",
        decode_s + prefill_s,
    )
    # tool rounds are sequential within a trajectory; calls of one round run in parallel (agentic_tool_workers)
    search_share = DEFAULTS["search_share"] if "python" in tools["tools"] and "search" in tools["tools"] else 1.0
    if "search" not in tools["tools"]:
        search_share = 0.0
    provider = tools["provider"] or "local"
    lat_search = measured.get(
        "latency_search_s",
        DEFAULTS["latency_search_local_s"] if provider in ("local", "replay") else DEFAULTS["latency_search_web_s"],
    )
    lat_python = measured.get("latency_python_s", DEFAULTS["latency_python_s"])
    latency = search_share * lat_search + (1 - search_share) * lat_python if has_tools else 0.0
    tool_s = waves * calls * latency
    lat_src = "measured (tools/*/latency_p50_s)" if "latency_search_s" in measured else "default latencies"
    plan.add(
        "time: tool waits",
        f"{_fmt_time(tool_s)} per rollout step",
        f"{calls:.2f} calls per trajectory ({calls_src}) x {latency:.2f} s ({lat_src}; {', '.join(tools['tools']) or 'no tools'})",
        "tool_s",
        tool_s,
    )
    trained_tokens = per_rank * (prompt_len / 2 + gen)
    extra = (1 if float(values["rl_kl_coef"]) > 0 else 0) + (1 if int(values["rl_num_iterations"]) > 1 else 0)
    iterations = int(values["rl_num_iterations"])
    train_s = _train_seconds(shape, trained_tokens, gc, device, extra) * iterations
    if device.kind == "cpu":
        train_s += iterations * updates_per_rollout * DEFAULTS["cpu_update_s"]
        rate = f"CPU profile: {DEFAULTS['cpu_flops']:.0e} FLOP/s + {DEFAULTS['cpu_update_s']} s per update"
    else:
        rate = f"MFU {DEFAULTS['mfu']:.0%} of bf16 peak"
    plan.add(
        "time: update",
        f"{_fmt_time(train_s)} per rollout step",
        f"{'8' if gc else '6'} x params x {trained_tokens:.0f} trained tokens per rank ({rate})",
        "train_s",
        train_s,
    )
    dyn = 1.0
    if values.get("rl_dynamic_sampling"):
        dyn = min(2.2, float(values["rl_dynamic_sampling_max_batches"]))
    step = dyn * (decode_s + prefill_s + tool_s) + train_s
    plan.add(
        "time: per rollout step",
        _fmt_time(step),
        "rollout + tools + update"
        + (f"; dynamic sampling: {dyn:.1f} rollouts per update (demo measured 2.2)" if dyn > 1 else "")
        + (f"; {GPU_STEP_CHECK}" if device.kind == "gpu" else ""),
        "step_s",
        step,
    )

    # ---- run length
    max_steps = int(values.get("max_steps") or -1)
    if max_steps > 0:
        rollout_steps = math.ceil(max_steps / updates_per_rollout)
        steps_src = f"max_steps {max_steps} / {updates_per_rollout} update(s) per rollout"
    else:
        rows, rows_src = _dataset_rows(values, base_dir)
        epochs = float(values.get("num_train_epochs", 3.0))
        if rows is None:
            rollout_steps, steps_src = 0, rows_src + ": pass max_steps or the data to get the run length"
            plan.warnings.append(f"run length unknown: {rows_src}")
        else:
            rollout_steps = math.ceil(epochs * math.floor(rows / prompts))
            steps_src = f"num_train_epochs {epochs:g} x {rows} rows / {prompts} prompts ({rows_src})"
    optimiser_steps = rollout_steps * updates_per_rollout
    evals = 0
    eval_s = 0.0
    if str(values.get("eval_strategy", "no")) == "steps" and values.get("eval_dataset"):
        every = int(values.get("eval_steps") or 500)
        evals = optimiser_steps // every + (1 if values.get("eval_on_start") else 0)
        val_rows = int(values.get("arpo_val_max_samples") or 300)
        eval_waves = math.ceil(val_rows / world / slots)
        eval_s = evals * eval_waves * (steps_per_wave * step_s + calls * latency)
    startup = DEFAULTS["startup_cpu_s" if device.kind == "cpu" else "startup_gpu_s"]
    run_s = startup + rollout_steps * step + eval_s
    plan.add(
        "time: run",
        f"{_fmt_time(run_s)} ({rollout_steps} rollout steps = {optimiser_steps} optimiser steps, {evals} validations)",
        f"{steps_src}; + {startup:.0f} s start-up (default)",
        "run_s",
        run_s,
    )
    plan.numbers["rollout_steps"] = rollout_steps

    # ---- search calls and cost
    if "search" in tools["tools"]:
        hit = measured.get("search_cache_hit_rate", DEFAULTS["cache_hit_rate"] if tools["cache"] else 0.0)
        hit_src = "measured (tools/search/cache_hit_rate)" if "search_cache_hit_rate" in measured else (
            "default expected hit rate" if tools["cache"] else "no cache configured")  # fmt: skip
        total_calls = (rollout_steps * dyn * trajs + evals * int(values.get("arpo_val_max_samples") or 300)) * calls
        total_calls *= search_share
        paid = total_calls * (1 - hit)
        if price is None:
            price = SEARCH_PRICE_PER_1K.get(provider, 1.0)
            price_src = f"list price of {provider} (--search-price-per-1k to change)"
        else:
            price_src = "--search-price-per-1k"
        cost = paid / 1000 * price
        plan.add(
            "search: API calls",
            f"{paid:,.0f} after a {hit:.0%} cache hit rate ({total_calls:,.0f} searches)",
            f"{calls:.2f} calls per trajectory x {search_share:.0%} searches ({tools['source']}); {hit_src}",
            "search_calls",
            paid,
        )
        plan.add("search: cost", f"${cost:,.2f} at ${price:g} per 1000 calls", price_src, "search_cost_usd", cost)

    _disk(plan, values, shape, finetuning, lora_rank, optimiser_steps)


def _plan_sft(plan, values, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par,
              ds_src, precision, per_device, accum, base_dir) -> None:  # fmt: skip
    cutoff = int(values.get("cutoff_len") or 2048)
    seq = DEFAULTS["sft_fill"] * cutoff
    micro = per_device * cutoff
    _memory(plan, shape, device, world, finetuning, lora_rank, fp32_master, gc, zero, off_opt, off_par, ds_src,
            precision, cutoff, 0, micro, 1024, 0.0, "gpu", rl=False)  # fmt: skip
    tokens = per_device * accum * seq  # per rank and optimiser step
    train_s = _train_seconds(shape, tokens, gc, device)
    if device.kind == "cpu":
        train_s += accum * DEFAULTS["cpu_update_s"]  # host time of a micro-batch (optimizer, data, dispatch)
        rate = f"CPU profile: {DEFAULTS['cpu_flops']:.0e} FLOP/s + {DEFAULTS['cpu_update_s']} s per micro-batch"
    else:
        rate = f"MFU {DEFAULTS['mfu']:.0%} of bf16 peak"
    plan.add(
        "time: per optimiser step",
        _fmt_time(train_s),
        f"{per_device} x {accum} rows x {seq:.0f} tokens (default {DEFAULTS['sft_fill']:.0%} of cutoff_len {cutoff}); {rate}",
        "step_s",
        train_s,
    )
    max_steps = int(values.get("max_steps") or -1)
    if max_steps > 0:
        steps, src = max_steps, f"max_steps {max_steps}"
    else:
        rows, rows_src = _dataset_rows(values, base_dir)
        epochs = float(values.get("num_train_epochs", 3.0))
        if rows is None:
            steps, src = 0, rows_src
            plan.warnings.append(f"run length unknown: {rows_src}")
        else:
            steps = math.ceil(epochs * rows / (per_device * accum * world))
            src = f"num_train_epochs {epochs:g} x {rows} rows / {per_device * accum * world} per step ({rows_src})"
    startup = DEFAULTS["startup_cpu_s" if device.kind == "cpu" else "startup_gpu_s"]
    run_s = startup + steps * train_s
    src += f"; + {startup:.0f} s start-up (default)"
    plan.add("time: run", f"{_fmt_time(run_s)} ({steps} optimiser steps)", src, "run_s", run_s)
    plan.numbers["rollout_steps"] = 0
    _disk(plan, values, shape, finetuning, lora_rank, steps)


def _disk(plan: Plan, values: dict[str, Any], shape: ModelShape, finetuning: str, lora_rank: int, steps: int) -> None:
    n = shape.params()
    if finetuning == "lora":
        model_bytes = 2 * shape.lora_params(lora_rank)
        opt_bytes = 8 * shape.lora_params(lora_rank)
    else:
        model_bytes = 2 * n
        opt_bytes = (12 if not values.get("pure_bf16") else 4) * n
    per_ckpt = model_bytes + (0 if values.get("save_only_model") else opt_bytes)
    if str(values.get("save_strategy", "steps")) == "no":
        kept = 0
    else:
        every = int(values.get("save_steps") or 500)
        kept = steps // every if steps else 0
        limit = values.get("save_total_limit")
        if limit:
            kept = min(kept, int(limit))
    total = (kept * per_ckpt + model_bytes) / GIB
    plan.add(
        "disk: checkpoints",
        f"{total:.1f} GiB ({kept} checkpoint(s) of {per_ckpt / GIB:.1f} GiB + final model {model_bytes / GIB:.1f} GiB)",
        f"save_steps, save_total_limit, save_only_model {bool(values.get('save_only_model'))}; "
        f"{'optimizer states included' if not values.get('save_only_model') else 'model only'}",
        "disk_gib",
        total,
    )
    if total > 1024:
        plan.warnings.append(
            f"checkpoints take {total / 1024:.1f} TiB: set save_total_limit, save_only_model: true or fewer saves."
        )


def read_measured(log_path: str | os.PathLike) -> dict[str, float]:
    r"""Means over the training steps of an earlier run's `trainer_log.jsonl` that the planner can use.

    Returns:
        `response_tokens` (`rollout/response_length`), `tool_calls_per_traj`, `search_cache_hit_rate`
        (`tools/search/cache_hit_rate`), `latency_search_s` / `latency_python_s` (`tools/<tool>/latency_p50_s`),
        `decode_step_s` (`perf/decode_step_ms` / 1000), `fills_per_step` (`rollout/fills`: budget fills of one
        rollout step, all groups); keys that the log lacks are left out.

    Raises:
        PlanError: unreadable file.
    """
    keys = {
        "rollout/response_length": ("response_tokens", 1.0),
        "rollout/tool_calls_per_traj": ("tool_calls_per_traj", 1.0),
        "tools/search/cache_hit_rate": ("search_cache_hit_rate", 1.0),
        "tools/search/latency_p50_s": ("latency_search_s", 1.0),
        "tools/python/latency_p50_s": ("latency_python_s", 1.0),
        "perf/decode_step_ms": ("decode_step_s", 1e-3),
        "rollout/fills": ("fills_per_step", 1.0),
    }
    sums: dict[str, list[float]] = {}
    try:
        with open(log_path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                for key, (name, scale) in keys.items():
                    if isinstance(row.get(key), (int, float)):
                        sums.setdefault(name, []).append(float(row[key]) * scale)
    except (OSError, ValueError) as err:
        raise PlanError(f"--measured {log_path}: {err}") from err
    return {k: sum(v) / len(v) for k, v in sums.items() if v}


_TRAINING_KEYS = (
    "per_device_train_batch_size", "gradient_accumulation_steps", "max_steps", "num_train_epochs", "save_steps",
    "save_total_limit", "save_only_model", "save_strategy", "eval_strategy", "eval_steps", "eval_on_start", "bf16",
    "fp16", "gradient_checkpointing", "deepspeed", "output_dir",
)  # fmt: skip


def plan_for_run(model_args: Any, data_args: Any, training_args: Any, finetuning_args: Any) -> Plan:
    r"""The plan of a run that is starting, from LLaMA-Factory's parsed arguments (the trainer logs it first).

    The device is the detected one and the ranks are `training_args.world_size`.

    Raises:
        PlanError: as `make_plan`.
    """
    recipe: dict[str, Any] = {}
    for args in (model_args, data_args, finetuning_args):
        fields = dataclasses.fields(args) if dataclasses.is_dataclass(args) else ()
        names = [f.name for f in fields] or list(vars(args))
        recipe.update({name: getattr(args, name, None) for name in names})
    for key in _TRAINING_KEYS:
        value = getattr(training_args, key, None)
        recipe[key] = getattr(value, "value", value)  # IntervalStrategy -> "steps"
    if getattr(training_args, "hf_deepspeed_config", None) is not None:
        recipe["deepspeed"] = training_args.hf_deepspeed_config.config
    recipe["stage"] = getattr(finetuning_args, "agentic_stage", None) or getattr(finetuning_args, "stage", None)
    recipe = {k: v for k, v in recipe.items() if v is not None}
    world = int(getattr(training_args, "world_size", 1) or 1)
    return plan_recipe(recipe, str(recipe.get("output_dir", "this run")), Path.cwd(), num_gpus=world)


def add_subcommand(subparsers) -> None:
    r"""Register `llamafactory-agentic plan` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "plan",
        help="before a run: peak GPU memory per phase, time per step and run, search calls and cost, checkpoint disk",
        description="Plan a training recipe without loading a model: memory per phase and whether it fits the GPU, "
        "wall time per step and for the run, search-API calls and cost after the cache, disk for checkpoints. Each "
        "figure names where its inputs came from (docs/plan.md).",
    )
    p.add_argument("recipes", nargs="+", metavar="RECIPE.yaml")
    p.add_argument("--gpu", help=f"plan for this card: {', '.join(GPUS)} or cpu (default: the detected one)")
    p.add_argument("--num-gpus", type=int, help="ranks (default: the detected count, or 1)")
    p.add_argument("--model-shape", help=f"a config.json or one of: {', '.join(KNOWN_SHAPES)}")
    p.add_argument("--measured", metavar="trainer_log.jsonl", help="take response length, tool calls, cache hit "
                   "rate, tool latency and decode step from an earlier run's log")  # fmt: skip
    p.add_argument("--search-price-per-1k", type=float, help="dollars per 1000 search-API calls")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="recipe keys to override")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON too")
    p.set_defaults(func=run_cli)


def run_cli(args) -> int:
    r"""`llamafactory-agentic plan`: print one table per recipe; 2 when a recipe cannot be planned."""
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"plan: --set {item}: expected KEY=VALUE", flush=True)
            return 2
        overrides[key] = yaml.safe_load(value)
    measured = read_measured(args.measured) if args.measured else None
    rc = 0
    for recipe in args.recipes:
        try:
            plan = make_plan(recipe, args.gpu, args.num_gpus, args.model_shape, measured, args.search_price_per_1k,
                             overrides)  # fmt: skip
        except PlanError as err:
            print(f"plan: {err}", flush=True)
            rc = 2
            continue
        print(plan.format())
        if args.json:
            print(json.dumps(plan.numbers, sort_keys=True))
        print()
    return rc
