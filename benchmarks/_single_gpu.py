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

"""Shared pieces of the one-GPU benchmarks (`bench_single_gpu.py`, `bench_vs_trl_gpu.py`): random-weight models,
synthetic prompts of a fixed length, LLaMA-Factory recipes, `llamafactory-cli train` runs and result lines.

Prompts are random `[extra_i]` tokens (one token each in the padded tokenizer of `build_real_size_model`) in the
`arpo_rl` row layout, rendered by LLaMA-Factory's `qwen` template, so every prompt has the same length and a random
policy answers with random text (no tool calls). No file outside the repository is needed.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

HBM_BYTES_PER_S = 4.8e12  # H200 HBM3e bandwidth: the weight-read floor of a decode step is bytes / this
SMOKE_SHAPE = dict(  # `--smoke`: every code path on CPU in seconds
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=2048,
    tie_word_embeddings=False,
)
SYSTEM = "You are a helpful assistant."
# `--smoke` geometry of the peer step (`add_peer_geometry`): every code path on CPU in seconds
PEER_SMOKE_GEOMETRY = dict(prompts=2, group=4, response=16, prompt_length=32, micro=4, accum=1)


def add_peer_geometry(parser: Any) -> None:
    r"""The peer step's batch geometry options (16 prompts x 8, 512 + 1024 tokens, 2 updates of 32 x 2 per rollout),
    one declaration for `bench_vs_trl_gpu.py` and `bench_vllm_gpu.py`, whose runs are then the same step."""
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--response", type=int, default=1024)
    parser.add_argument("--prompt-length", type=int, default=512)
    parser.add_argument("--micro", type=int, default=32)
    parser.add_argument("--accum", type=int, default=2)


def use_smoke_geometry(args: Any) -> None:
    r"""Replace the parsed geometry by `PEER_SMOKE_GEOMETRY` (`--smoke`)."""
    for key, value in PEER_SMOKE_GEOMETRY.items():
        setattr(args, key, value)


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


class Results:
    r"""`results.jsonl` (one JSON object per measurement) and `summary.csv` under `out`, plus a printed line each."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []

    def add(self, part: str, **values: Any) -> dict:
        row = {"part": part, **values}
        self.rows.append(row)
        with open(self.out / "results.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row, default=str) + "\n")
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in values.items())
        print(f"RESULT {part} {shown}", flush=True)
        self._csv()
        return row

    def _csv(self) -> None:
        keys: list[str] = []
        for row in self.rows:
            keys += [k for k in row if k not in keys]
        lines = [",".join(keys)]
        for row in self.rows:
            lines.append(",".join(_csv_cell(row.get(k, "")) for k in keys))
        (self.out / "summary.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _csv_cell(value: Any) -> str:
    text = _fmt(value)
    return f'"{text}"' if "," in text else text


def build_model(work: Path, name: str, smoke: bool) -> Path:
    r"""A random-weight model directory of the named Qwen2.5 shape (drawn on the GPU when there is one)."""
    from llamafactory_agentic.testing import build_real_size_model

    path = work / "models" / (name + ("-smoke" if smoke else ""))
    if (path / "config.json").is_file():
        return path
    t0 = time.perf_counter()
    device = "cuda" if cuda() else "cpu"
    build_real_size_model(path, name, dtype="bfloat16" if cuda() else "float32", device=device,
                          **(SMOKE_SHAPE if smoke else {}))  # fmt: skip
    if cuda():
        import torch

        torch.cuda.empty_cache()
    print(f"built random {name} in {time.perf_counter() - t0:.1f}s at {path}", flush=True)
    return path


def drop_model(path: Path, keep: bool) -> None:
    if not keep:
        shutil.rmtree(path, ignore_errors=True)


def render(tokenizer: Any, user: str) -> str:
    r"""LLaMA-Factory's `qwen` template around one user message (what `encode_rl_prompts` produces)."""
    return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def prompt_texts(model_dir: Path, n: int, length: int, seed: int = 0) -> list[str]:
    r"""`n` user messages whose rendered prompt is about `length` tokens (random `[extra_i]` tokens)."""
    import random

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    extras = [t for t in tokenizer.get_added_vocab() if t.startswith("[extra_")]
    overhead = len(tokenizer.encode(render(tokenizer, ""), add_special_tokens=False))
    rng = random.Random(seed)
    body = max(length - overhead, 1)
    return ["".join(rng.choice(extras) for _ in range(body)) for _ in range(n)]


def write_dataset(work: Path, texts: list[str]) -> Path:
    r"""An `arpo_rl` parquet file of the prompts and its `dataset_info.json`; returns the dataset folder."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = work / "data"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [
        {
            "data_source": "synthetic",
            "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
            "ability": "math",
            "reward_model": {"ground_truth": "3", "style": "rule"},
            "extra_info": {"index": i, "question": text[:32], "split": "train"},
        }
        for i, text in enumerate(texts)
    ]
    pq.write_table(pa.Table.from_pylist(rows), folder / "train.parquet")
    info = {"synthetic": {"file_name": "train.parquet", "formatting": "arpo_rl"}}
    (folder / "dataset_info.json").write_text(json.dumps(info), encoding="utf-8")
    (folder / "no_tools.yaml").write_text("tools: []\n", encoding="utf-8")  # a random policy makes no tool calls
    return folder


def recipe(
    model_dir: Path,
    data_dir: Path,
    output_dir: Path,
    *,
    prompts: int,
    group: int,
    initial: int,
    prompt_length: int,
    response: int,
    micro: int,
    accum: int,
    steps: int,
    finetuning: str = "full",
    gradient_checkpointing: bool = True,
    slots: int | None = None,
    extra: dict | None = None,
) -> dict:
    r"""A `llamafactory-cli train` recipe (LLaMA-Factory's key order) for an ARPO run on the synthetic prompts.

    `gradient_checkpointing` is set through LLaMA-Factory's own switch, `disable_gradient_checkpointing` (LLaMA-Factory
    checkpoints unless it is set, whatever the Trainer's `gradient_checkpointing` says); until 2026-12-04 only the
    Trainer's key was written, so every run of these benchmarks, `gc` False in their results included, checkpointed.
    """
    gpu = cuda()
    values: dict[str, Any] = {
        "model_name_or_path": str(model_dir),
        "stage": "arpo",
        "do_train": True,
        "finetuning_type": finetuning,
    }
    if finetuning == "lora":
        values.update(lora_rank=64, lora_alpha=128, lora_target="all")
    if finetuning == "full" and gpu:
        values["pure_bf16"] = True  # bf16 weights, gradients and AdamW states (8 bytes per parameter)
    values.update(
        arpo_rollout_n=group,
        arpo_initial_rollouts=initial,
        arpo_budget_fill="all_at_once",
        arpo_rollout_batch_size=prompts,
        arpo_max_prompt_length=prompt_length + 64,
        arpo_max_response_length=response,
        arpo_rollout_backend="hf",
        arpo_hf_generation_batch_size=slots or prompts * group,
        arpo_rollout_schedule="continuous",
        agentic_tool_config=str(data_dir / "no_tools.yaml"),
        dataset="synthetic",
        dataset_dir=str(data_dir),
        template="qwen",
        cutoff_len=prompt_length + response + 64,
        max_samples=max(prompts, 1) * 4,
        preprocessing_num_workers=1,
        output_dir=str(output_dir),
        logging_steps=1,
        save_strategy="no",
        plot_loss=False,
        overwrite_output_dir=True,
        report_to="none",
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accum,
        gradient_checkpointing=gradient_checkpointing,
        disable_gradient_checkpointing=not gradient_checkpointing,
        learning_rate=1.0e-6,
        max_steps=steps,
        lr_scheduler_type="constant",
        bf16=gpu,
        seed=42,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
    )
    if not gpu:
        values["use_cpu"] = True
    values.update(extra or {})
    return values


def run_train(work: Path, values: dict, timeout: float, name: str, logs: Path | None = None) -> dict:
    r"""`llamafactory-cli train recipe.yaml` in a subprocess; returns `{rc, wall_s, records, metrics, log}`.

    With `logs`, the recipe, the last 200 kB of the output and `trainer_log.jsonl` are copied to `logs/<name>/`.
    """
    import yaml

    run = work / name
    run.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(values["output_dir"], ignore_errors=True)  # no records of an earlier run in trainer_log.jsonl
    path = run / "recipe.yaml"
    path.write_text(yaml.safe_dump(values, sort_keys=False), encoding="utf-8")
    cli = shutil.which("llamafactory-cli", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])
    env = dict(os.environ)
    env.setdefault("PYTHONPATH", str(REPO))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([cli, "train", str(path)], cwd=run, capture_output=True, text=True, timeout=timeout,
                              env=env)  # fmt: skip
        rc, output = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc = 124
        output = (exc.stdout or b"").decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        output += (exc.stderr or b"").decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
    wall = time.perf_counter() - t0
    (run / "train.log").write_text(output, encoding="utf-8")
    records = []
    log = Path(values["output_dir"]) / "trainer_log.jsonl"
    if log.is_file():
        records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    metrics = {}
    results = Path(values["output_dir"]) / "train_results.json"
    if results.is_file():
        metrics = json.loads(results.read_text())
    if rc != 0:
        print(f"[{name}] exit {rc}; last lines:\n{output[-4000:]}", flush=True)
    if logs is not None:
        keep = Path(logs) / name
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, keep / "recipe.yaml")
        (keep / "train.log").write_text(output[-200_000:], encoding="utf-8")
        if log.is_file():
            shutil.copy(log, keep / "trainer_log.jsonl")
    return {"rc": rc, "wall_s": wall, "records": records, "metrics": metrics, "log": output}


def first(records: list[dict], key: str, default: float | None = None) -> float | None:
    for record in records:
        if isinstance(record.get(key), (int, float)):
            return float(record[key])
    return default


def largest(records: list[dict], key: str) -> float | None:
    values = [float(r[key]) for r in records if isinstance(r.get(key), (int, float))]
    return max(values) if values else None


def total(records: list[dict], key: str) -> float:
    return float(sum(float(r[key]) for r in records if isinstance(r.get(key), (int, float))))


def weight_read_bytes(config: Any) -> int:
    r"""Bytes of bf16 weights a decode step reads: every parameter except an untied input embedding (one row each)."""
    from llamafactory_agentic.train.arpo.memory import ModelShape

    shape = ModelShape.from_config(config)
    params = shape.params() - (0 if shape.tied else shape.vocab * shape.hidden)
    return 2 * params
