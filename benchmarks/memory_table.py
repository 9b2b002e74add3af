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

"""The table of docs/scaling.md of what fits on one 80 GB and one 141 GB GPU, computed by `train.arpo.memory`.

    python benchmarks/memory_table.py            # prints the markdown table

For every Qwen2.5 shape, method and length setting it picks the largest KV-cache slot count
(`arpo_hf_generation_batch_size`) and token micro-batch (`rl_micro_batch_tokens`) whose estimated rollout and loss
peaks stay within 95% of the card minus 1 GiB (CUDA context, allocator slack), and prints them with the estimate.
Estimates only: the measured peaks come from the `memory/*` logs (`bench_single_gpu.py --parts memory`).
"""

import sys
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llamafactory_agentic.testing import real_size_config  # noqa: E402
from llamafactory_agentic.train.arpo.memory import ModelShape, estimate_step_memory  # noqa: E402


CARDS = {"80 GB": 80e9 / 2**30, "141 GB": 141e9 / 2**30}
LENGTHS = {"reasoning 1536 + 4096": (1536, 4096), "deep search 2000 + 6192": (2000, 6192)}  # prompt, response
METHODS = {
    "full, pure_bf16": dict(finetuning="full"),
    "full, fp32 master weights": dict(finetuning="full", fp32_master=True),
    "LoRA r64 (all linear)": dict(finetuning="lora", lora_rank=64),
}
MODELS = ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-14b"]
SLOTS = (128, 64, 32, 16, 8)
TOKENS = (32768, 16384, 8192, 4096)


def fit(shape: ModelShape, method: dict, lengths: tuple[int, int], capacity_gib: float):
    r"""(slots, tokens, LoRA merge, estimate) of the largest setting that fits, or None.

    LoRA tries `arpo_hf_lora_merge: gpu` (merged copies on the GPU, fastest) before `cpu` (merged in place).
    """
    usable = 0.95 * capacity_gib - 1.0
    merges = ("gpu", "cpu") if method["finetuning"] == "lora" else ("gpu",)
    for slots in SLOTS:
        for merge in merges:
            for tokens in TOKENS:
                est = estimate_step_memory(
                    shape, context=sum(lengths), slots=slots, micro_batch_tokens=tokens, lora_merge=merge,
                    prompt_length=lengths[0], **method,
                )  # fmt: skip
                if est.peak <= usable:
                    return slots, tokens, merge, est
    return None


def table() -> str:
    lines = [
        "| model | method | prompt + response | static GiB | 80 GB: slots / tokens / peak GiB | "
        "141 GB: slots / tokens / peak GiB | measured on the H200 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name in MODELS:
        shape = ModelShape.from_config(real_size_config(name))
        for method_name, method in METHODS.items():
            if method.get("fp32_master") and name not in ("qwen2.5-7b",):
                continue  # shown once, for the 7B case
            for length_name, lengths in LENGTHS.items():
                if name in ("qwen2.5-0.5b", "qwen2.5-1.5b") and sum(lengths) > 6000:
                    continue
                static = estimate_step_memory(shape, context=sum(lengths), **method).static
                cells = []
                for capacity in CARDS.values():
                    found = fit(shape, method, lengths, capacity)
                    if found is None:
                        cells.append("does not fit")
                        continue
                    slots, tokens, merge, est = found
                    note = " (merge cpu)" if merge == "cpu" else ""
                    cells.append(f"{slots} / {tokens} / {est.peak:.0f}{note}")
                label = name.replace("qwen2.5-", "").upper()
                lines.append(
                    f"| {label} | {method_name} | {length_name} | {static:.0f} | {cells[0]} | {cells[1]} | — |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    print(table())
