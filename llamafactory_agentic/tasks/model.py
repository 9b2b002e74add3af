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

r"""Locally built models for the synthetic task: a tokenizer trained on the task's text and a random Qwen2 model.

The tokenizer is a byte-level BPE (`TOKENIZER`: at most 1024 tokens) trained on the task's text. Numbers are cut
from the left into chunks of up to two digits before BPE, each chunk one token (`4817` is `48` `17`, `150` is `15`
`0`), and every two-digit chunk `00`-`99` is in the vocabulary. The city names, shared by every split and frequent in
the text, become whole tokens, with and without a leading space (` Dalumere` in a fact, `Dalumere` in
`\boxed{Dalumere}`). People are numeric ids, so a held-out question never needs a token that training did not use.
"""

import json
import os
from pathlib import Path

from .synthetic import SYSTEM_PROMPT


# sizes of the model trained from scratch on the synthetic cold-start data (Qwen2 architecture, random init)
MODEL_SIZES = {
    # the CPU demo: small enough for agentic SFT + ARPO in about 5 minutes on 2 cores. 2 layers (copying a span by
    # attention takes two) trained 1000 SFT steps kept ARPO's gain on 9 seeds at a third of the cost of the former 4
    # layers x 1500 steps (benchmarks/results/compare_algorithms/demo_budget_gpu/README.md)
    "demo": dict(hidden_size=128, num_layers=2, intermediate_size=384, num_heads=4, num_kv_heads=2),
    # unit tests of the model builder and the comparison's smoke scale
    "test": dict(hidden_size=96, num_layers=3, intermediate_size=256, num_heads=4, num_kv_heads=2),
    # GPU comparison runs (benchmarks/compare_algorithms.py --scale gpu)
    "gpu": dict(hidden_size=512, num_layers=8, intermediate_size=1536, num_heads=8, num_kv_heads=4),
}
# numbers in chunks of up to two digits, each chunk one token (in the way Llama 3's tokenizer cuts numbers into chunks
# of up to three): a four-digit id such as 4817 is two tokens, `48` `17`; the 100 chunks are frequent enough for a
# model trained from scratch to learn to copy them in a few hundred steps (chunks of three digits were too rare, single
# digits too long to copy)
TOKENIZER = dict(vocab_size=1024, digits="pairs")


def tokenizer_corpus(task_dir: str | os.PathLike) -> list[str]:
    r"""Text lines for the tokenizer: the task's prompts, trajectories and facts (used as they are, nothing split).

    The city names (the only invented words; every split shares them) are frequent enough in these lines to become
    whole tokens, so that an answer read from a search result is one token to write.

    Args:
        task_dir: A folder with sft.jsonl (arpo_sft) and train.jsonl (arpo_rl): written by `generate_task`, by
            `skeleton.write_task_skeleton`, or your own data in those layouts.

    Returns:
        Distinct lines (system prompt first).
    """
    task_dir = Path(task_dir)
    lines = [SYSTEM_PROMPT]
    for name in ("sft.jsonl", "train.jsonl", "facts.jsonl"):
        path = task_dir / name
        if not path.is_file():
            continue
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                if "conversations" in row:
                    lines += [m["value"] for m in row["conversations"]]
                elif "prompt" in row:
                    lines += [m["content"] for m in row["prompt"][1:]]
                else:
                    lines.append(row["text"])
    return list(dict.fromkeys(lines))


def build_task_model(
    output_dir: str | os.PathLike,
    task_dir: str | os.PathLike,
    size: str = "demo",
    seed: int = 0,
    overrides: dict[str, int] | None = None,
) -> Path:
    r"""Build a random-weight Qwen2 model with a tokenizer trained on the synthetic task's text (no model hub).

    The tokenizer is `TOKENIZER`'s (two-digit number chunks, at most 1024 tokens; see the module docstring) trained on
    `tokenizer_corpus(task_dir)`; the model's vocabulary is the tokenizer's size.

    Args:
        output_dir: Where to save the model and tokenizer.
        task_dir: The tokenizer's training text: a folder with sft.jsonl and train.jsonl (`tokenizer_corpus`).
        size: One of `MODEL_SIZES`.
        seed: Seed of the weight initialisation.
        overrides: Replace entries of the size's spec (`hidden_size`, `num_layers`, `intermediate_size`, `num_heads`,
            `num_kv_heads`), e.g. to measure how the cold start depends on the model's shape.

    Returns:
        `output_dir`, loadable by `llamafactory-cli` with `template: qwen`.

    Raises:
        KeyError: an unknown size or override key.
    """
    from ..testing import build_tiny_model

    if size not in MODEL_SIZES:
        raise KeyError(f"unknown model size {size!r}; choose one of {', '.join(MODEL_SIZES)}")
    unknown = sorted(set(overrides or {}) - set(MODEL_SIZES[size]))
    if unknown:
        raise KeyError(f"unknown model setting(s) {', '.join(unknown)}; choose from {', '.join(MODEL_SIZES[size])}")
    spec = {**TOKENIZER, **MODEL_SIZES[size], **(overrides or {})}
    path = build_tiny_model(output_dir, seed=seed, extra_corpus=tokenizer_corpus(task_dir), **spec)
    with open(Path(path) / "tiny_model.json", "w", encoding="utf-8") as f:
        json.dump(
            {
                "built_by": "llamafactory_agentic.tasks.model.build_task_model",
                "size": size,
                "seed": seed,
                "overrides": dict(overrides or {}),
            },
            f,
        )
    return Path(path)
