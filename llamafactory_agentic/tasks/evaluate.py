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

r"""Held-out evaluation of a policy on `arpo_rl` rows: one greedy trajectory per question through the real rollout.

`evaluate_policy` is the one entry point the demo and the comparison benchmark use. It runs the training rollout's own
agent loop (`rollout.AgenticRollout`, hf engine, `training=False`: greedy, no branching), the real tools (python
sandbox, local BM25 search) and the training reward on the model view, so the numbers are what the trainer's
validation reports. The evaluation harness (`llamafactory-agentic eval`) is the tool for the papers' benchmarks and
protocol (pass@k, judges, endpoints); this is the quick in-process check of a checkpoint on the synthetic task.
"""

import json
import os
import re
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .synthetic import DEFAULT_SEARCH_TOPK


@dataclass
class EvalResult:
    r"""Greedy held-out metrics of one policy.

    Attributes:
        model: The evaluated model folder.
        questions: Questions evaluated.
        accuracy: Share answered exactly right (reward correctness 1), in [0, 1].
        tool_calls_per_question: Mean tool calls per trajectory (both tools).
        reward: Mean reward.
        format_ok: Share passing the format gate.
        by_kind: `{kind: {"accuracy", "tool_calls", "questions"}}` (kind = the row's `ability`).
        seconds: Wall time of the evaluation (model loading excluded).
        session_reuse: For the `python_session` environment (docs/tools.md "Environments"): `{"two_calls":
            trajectories with at least two python_session calls, "reused": those whose second call ran without error
            and names a variable the first call assigned}`; zeros when no trajectory called it twice.
    """

    model: str
    questions: int
    accuracy: float
    tool_calls_per_question: float
    reward: float
    format_ok: float
    by_kind: dict[str, dict[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    session_reuse: dict[str, int] = field(default_factory=lambda: {"two_calls": 0, "reused": 0})

    def to_dict(self) -> dict[str, Any]:
        r"""Plain dict (JSON-serialisable)."""
        return asdict(self)


_ASSIGNED = re.compile(r"^\s*([A-Za-z_]\w*)\s*=(?!=)", re.MULTILINE)


def second_call_reuses_state(calls: list[Any], tool: str = "python_session") -> bool | None:
    r"""Whether a trajectory's second `tool` call uses a variable its first call assigned (and ran without error).

    Args:
        calls: The trajectory's `ToolCallRecord`s (`tool`, `content`, `status`), in order.
        tool: The environment's tag.

    Returns:
        None when the trajectory made fewer than two `tool` calls; else True when the first call assigns a name
        (`xs = [...]` on a line of its own) that the second call's code names and the second call's status is `ok`
        (a `NameError` in a fresh interpreter is status `error`).
    """
    session = [c for c in calls if c.tool == tool]
    if len(session) < 2:
        return None
    names = set(_ASSIGNED.findall(session[0].content))
    used = set(re.findall(r"[A-Za-z_]\w*", session[1].content))
    return bool(names & used) and session[1].status == "ok"


def read_rl_rows(path: str | os.PathLike, max_samples: int | None = None) -> list[dict[str, Any]]:
    r"""Rows of an `arpo_rl` JSONL or parquet file, parsed and validated by the plugin's RL schema.

    Raises:
        ValueError: a malformed row (file, row and field named).
    """
    from ..data.rl_schema import RLRowError, parse_rl_row

    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        raw = pq.read_table(path).to_pylist()
    else:
        with open(path, encoding="utf-8") as f:
            raw = [json.loads(line) for line in f if line.strip()]
    if max_samples is not None:
        raw = raw[:max_samples]
    rows = []
    for i, row in enumerate(raw):
        try:
            rows.append(parse_rl_row(row))
        except RLRowError as err:
            raise ValueError(f"{path} row {i}: {err}") from None
    return rows


def evaluate_policy(
    model_dir: str | os.PathLike,
    rows_path: str | os.PathLike,
    search_index: str | os.PathLike | None,
    max_samples: int | None = None,
    template: str = "qwen",
    max_prompt_length: int = 512,
    max_response_length: int = 256,
    max_tool_calls: int = 3,
    search_topk: int = DEFAULT_SEARCH_TOPK,
    reward: str = "em",
    batch_size: int = 128,
    python_timeout: float = 10.0,
    device: str | None = None,
    tool_config: str | os.PathLike | None = None,
) -> EvalResult:
    r"""Greedy held-out accuracy and tool calls per question of the policy in `model_dir`.

    Args:
        model_dir: A Hugging Face model folder (e.g. a `llamafactory-cli train` output).
        rows_path: Held-out rows in the `arpo_rl` layout (`.jsonl` or `.parquet`).
        search_index: Folder of the local BM25 index (`agentic_search_index`); None uses the search tool's default.
        max_samples: Evaluate only the first rows.
        template: LLaMA-Factory template that renders the prompts (as in training).
        max_prompt_length: Prompts keep their last tokens beyond this (tokens).
        max_response_length: Response budget, observations included (tokens).
        max_tool_calls: Tool-call limit per trajectory.
        search_topk: Snippets per search call; use the policy's training value (`agentic_search_topk`). The default is
            the synthetic task's (`DEFAULT_SEARCH_TOPK`, 1: `TaskConfig`, the demo's recipe, `task eval`).
        reward: Reward name (`agentic_reward`); accuracy is its correctness == 1.
        batch_size: Trajectories decoded together.
        python_timeout: Seconds per python call.
        device: Torch device of the policy; None picks the first visible GPU when there is one, else the CPU. The
            weights stay in float32 on every device, so a GPU and a CPU evaluation decode the same greedy tokens up
            to floating-point reduction order.
        tool_config: A tool config (`agentic_tool_config`, docs/tools.md), e.g. one with `python_session` for the
            synthetic task's stateful kind; None: the `python` and `search` tools.

    Returns:
        `EvalResult`.

    Raises:
        ValueError: a malformed row.
    """
    import torch
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..rewards import build_item, build_model_view, get_reward_function, score_batch
    from ..rollout.session import open_rollout_session
    from ..train.arpo.config import default_rollout_config

    rows = read_rl_rows(rows_path, max_samples)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    lf_template = get_template_and_fix_tokenizer(tokenizer, DataArguments(template=template))
    prompts = []
    for row in rows:
        messages = list(row.messages) + [{"role": "assistant", "content": ""}]
        ids, _ = lf_template.encode_oneturn(tokenizer, messages, row.system or None, None)
        prompts.append(ids[-max_prompt_length:])

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).to(device)
    model.eval()
    eos = tokenizer.eos_token_id
    config = default_rollout_config(
        group_size=1,
        initial_rollouts=1,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
        max_tool_calls=max_tool_calls,
        temperature=0.0,
        eos_token_id=eos,
        hf_generation_batch_size=batch_size,
    )
    tool_keys = dict(  # the `agentic_*` keys of the tool executor; the others take their defaults
        agentic_tool_workers=4,
        agentic_tool_retries=1,
        agentic_python_timeout=python_timeout,
        agentic_search_backend="local",
        agentic_search_topk=search_topk,
        agentic_search_index=str(search_index) if search_index else None,
        agentic_cache_path=None,
        agentic_tool_config=str(tool_config) if tool_config else None,
    )
    session = open_rollout_session(config, tokenizer, tools=tool_keys, model=model)
    reward_fn = get_reward_function(reward)
    start = time.perf_counter()
    per_kind: dict[str, list[tuple[float, int]]] = defaultdict(list)
    rewards, formats, correct, calls = [], [], [], []
    reuse = {"two_calls": 0, "reused": 0}
    try:
        with torch.no_grad():
            for begin in range(0, len(prompts), batch_size):
                output = session.rollout(prompts[begin : begin + batch_size], training=False)
                for row, group in zip(rows[begin : begin + batch_size], output.groups):
                    traj = group[0]
                    text = build_model_view(tokenizer, list(traj.response_ids), list(traj.loss_mask), eos)
                    # as in training: metadata with `executed_tools` and the trajectory context (docs/rewards.md)
                    lf_row = {"_ground_truth": row.ground_truth, "_ability": row.ability, "_prompt": row.messages}
                    result = score_batch(reward_fn, [build_item(traj, lf_row, text)])[0]
                    ok = float(result.correctness >= 1.0)
                    rewards.append(float(result.score))
                    formats.append(float(result.format_ok))
                    correct.append(ok)
                    calls.append(int(traj.num_tool_calls))
                    per_kind[row.ability or "unknown"].append((ok, int(traj.num_tool_calls)))
                    reused = second_call_reuses_state(list(traj.tool_calls))
                    if reused is not None:
                        reuse["two_calls"] += 1
                        reuse["reused"] += int(reused)
    finally:
        session.close()
    n = max(len(rows), 1)
    by_kind = {
        kind: {
            "accuracy": sum(ok for ok, _ in items) / len(items),
            "tool_calls": sum(c for _, c in items) / len(items),
            "questions": float(len(items)),
        }
        for kind, items in sorted(per_kind.items())
    }
    return EvalResult(
        model=str(model_dir),
        questions=len(rows),
        accuracy=sum(correct) / n,
        tool_calls_per_question=sum(calls) / n,
        reward=sum(rewards) / n,
        format_ok=sum(formats) / n,
        by_kind=by_kind,
        seconds=time.perf_counter() - start,
        session_reuse=reuse,
    )
