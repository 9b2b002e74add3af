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

"""`llamafactory-agentic task init | generate | build-model | eval`: tasks from the command line.

`init` writes a task of one's own to edit (docs/tutorial.md); `generate` the synthetic tool-use task of the demo.
"""

import argparse
import json
import sys

from .synthetic import ALL_KINDS, DEFAULT_MIX, DEFAULT_SFT_MIX, DEFAULT_SKIP_TOOL_RATE


def parse_kind_values(items: list[str] | None, default: dict[str, float], flag: str = "--mix") -> dict[str, float]:
    r"""`KIND=WEIGHT` items of a command-line flag, added to (replacing entries of) `default`.

    Used by `task generate --mix` and `benchmarks/compare_algorithms.py` (`--mix`, `--sft-mix`, `--skip-tool-rate`).

    Raises:
        SystemExit: an item that is not `KIND=NUMBER` with KIND in `synthetic.ALL_KINDS` (the message names `flag`).
    """
    values = dict(default)
    for item in items or []:
        kind, sep, weight = item.partition("=")
        if not sep or kind not in ALL_KINDS:
            raise SystemExit(f"{flag} expects KIND=WEIGHT with KIND in {', '.join(ALL_KINDS)}, got {item!r}")
        try:
            values[kind] = float(weight)
        except ValueError:
            raise SystemExit(f"{flag} {item!r}: the weight must be a number") from None
    return values


def _parse_mix(items: list[str] | None) -> dict[str, float]:
    return parse_kind_values(items, DEFAULT_MIX, "--mix")


def _parse_skip(items: list[str] | None) -> float | dict[str, float] | None:
    if not items:
        return None
    if len(items) == 1 and "=" not in items[0]:
        return float(items[0])
    rates = {}
    for item in items:
        kind, sep, rate = item.partition("=")
        if not sep or kind not in ALL_KINDS:
            raise SystemExit(
                f"--skip-tool-rate expects RATE or KIND=RATE with KIND in {', '.join(ALL_KINDS)}, got {item!r}"
            )
        rates[kind] = float(rate)
    return rates


def _cmd_generate(args: argparse.Namespace) -> int:
    from .synthetic import TaskConfig, generate_task

    try:
        skip = _parse_skip(args.skip_tool_rate)
        config = TaskConfig(
            seed=args.seed,
            difficulty=args.difficulty,
            sizes={"sft": args.sft_size, "train": args.size, "heldout": args.heldout_size},
            mix=_parse_mix(args.mix),
            wrong_tool_rate=args.wrong_tool_rate,
            extra_tool_rate=args.extra_tool_rate,
            search_topk=args.search_topk,
            **({"skip_tool_rate": skip} if skip is not None else {}),
        )
        summary = generate_task(config, args.output)
    except (ValueError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(summary["counts"] | {"sft_styles": summary["sft_styles"], "facts": summary["facts"]}, indent=2))
    print(
        f"wrote {args.output}: sft.jsonl (arpo_sft), train.jsonl and heldout.jsonl (arpo_rl), facts.jsonl, "
        f"search_index/ (agentic_search_index), dataset_info.json (dataset_dir: {args.output})"
    )
    return 0


def _cmd_init(args: argparse.Namespace) -> int:
    from .skeleton import write_task_skeleton

    try:
        summary = write_task_skeleton(args.dir, seed=args.seed, force=args.force)
    except (FileExistsError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    rows = summary["rows"]
    print(
        f"wrote {args.dir}: units_tool.py (your tool, tag <convert>), units_reward.py (your reward), tools.yaml, "
        f"agentic_sft.yaml, arpo.yaml, eval.yaml (absolute paths: they run from any folder), data/ (dataset_info.json, sft.jsonl {rows['sft']} rows arpo_sft, "
        f"train.jsonl {rows['train']} and heldout.jsonl {rows['heldout']} rows arpo_rl). Next: docs/tutorial.md "
        f"(cd {args.dir} && export PYTHONPATH=$PWD)"
    )
    return 0


def _cmd_build_model(args: argparse.Namespace) -> int:
    from .model import build_task_model

    print(build_task_model(args.output_dir, args.task_dir, size=args.size, seed=args.seed))
    return 0


def _cmd_eval(args: argparse.Namespace) -> int:
    from .evaluate import evaluate_policy

    rows = []
    for model in args.models:
        result = evaluate_policy(
            model,
            args.data,
            args.search_index,
            max_samples=args.max_samples,
            template=args.template,
            max_response_length=args.max_response_length,
            max_tool_calls=args.max_tool_calls,
            search_topk=args.search_topk,
            reward=args.reward,
            device=args.device,
            tool_config=args.tool_config,
        )
        rows.append(result)
        if args.by_kind:
            for kind, values in result.by_kind.items():
                print(f"{model}  {kind:<14} accuracy {values['accuracy']:.3f}  tool calls {values['tool_calls']:.2f}")
        if result.session_reuse["two_calls"]:
            reuse = result.session_reuse
            print(
                f"{model}  second python_session calls using the first's variable: {reuse['reused']}/{reuse['two_calls']}"
            )
    print(f"{'model':<40} {'questions':>9} {'accuracy':>9} {'tool calls/q':>13} {'reward':>7}")
    for r in rows:
        print(f"{r.model:<40} {r.questions:>9} {r.accuracy:>9.3f} {r.tool_calls_per_question:>13.2f} {r.reward:>7.3f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump([r.to_dict() for r in rows], f, indent=2)
    return 0


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    r"""Register `task` with its sub-commands on the `llamafactory-agentic` parser."""
    from .synthetic import DEFAULT_SEARCH_TOPK

    task = subparsers.add_parser(
        "task", help="a task skeleton of your own, the synthetic task, a local model, evaluate"
    )
    sub = task.add_subparsers(dest="task_command", metavar="TASK_COMMAND", required=True)

    p = sub.add_parser(
        "generate",
        help="write the fact base, its search index, RL rows (arpo_rl), cold-start trajectories (arpo_sft)",
        description="Generate the synthetic tool-use task from a seed (no downloads). Held-out questions never "
        "overlap training ones: splits use disjoint people, and no question text occurs in two splits.",
    )
    p.add_argument("--output", required=True, help="folder to write (dataset_dir for the recipes)")
    p.add_argument("--size", type=int, default=800, help="RL training prompts (train.jsonl)")
    p.add_argument("--sft-size", type=int, default=600, help="cold-start trajectories (sft.jsonl)")
    p.add_argument("--heldout-size", type=int, default=100, help="held-out evaluation prompts (heldout.jsonl)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--difficulty", type=int, default=0, choices=(0, 1, 2, 3),
                   help="0 (the default, the demo's): 2-digit sums, 5-item lists, 4-digit ids, joining years "
                   "1900-1999; 1: 3-digit sums, 3-digit ids; 2: products, 8-item lists; 3: modular products, 12-item "
                   "lists")  # fmt: skip
    p.add_argument("--mix", nargs="*", metavar="KIND=WEIGHT",
                   help="weights of the question kinds of train.jsonl and heldout.jsonl, changing the defaults "
                   f"({' '.join(f'{k}={v}' for k, v in DEFAULT_MIX.items())}); sft.jsonl keeps its own mix "
                   f"({' '.join(f'{k}={v}' for k, v in DEFAULT_SFT_MIX.items())})")  # fmt: skip
    p.add_argument("--skip-tool-rate", nargs="+", metavar="RATE|KIND=RATE",
                   help="share of cold-start trajectories that answer a tool question without a tool, one rate or "
                   f"one per kind (default {' '.join(f'{k}={v}' for k, v in DEFAULT_SKIP_TOOL_RATE.items())})")  # fmt: skip
    p.add_argument("--wrong-tool-rate", type=float, default=0.1,
                   help="share that call the wrong tool first, then recover")  # fmt: skip
    p.add_argument("--extra-tool-rate", type=float, default=0.1,
                   help="share of no-tool trajectories with an unnecessary search")  # fmt: skip
    p.add_argument("--search-topk", type=int, default=DEFAULT_SEARCH_TOPK,
                   help="snippets per search in the trajectories (use the same agentic_search_topk to train)")  # fmt: skip
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser(
        "init",
        help="write a task of your own to edit: rows, dataset_info.json, a tool, a reward, recipes (docs/tutorial.md)",
        description="Write a small unit-conversion task (a module:Class tool with tag <convert>, a reward function, "
        "a tool config, agentic SFT / ARPO / evaluation recipes and data/ with arpo_sft and arpo_rl rows) as the "
        "starting point of your own task; docs/tutorial.md walks through it.",
    )
    p.add_argument("dir", help="folder to create (must be new or empty)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="overwrite the skeleton's files in a folder that is not empty")
    p.set_defaults(func=_cmd_init)

    p = sub.add_parser(
        "build-model",
        help="random Qwen2 model with a tokenizer trained on a task's text (yours or `task generate`'s)",
        description="Build a small random-weight Qwen2 model whose byte-level BPE tokenizer is trained on the "
        "task's text: sft.jsonl (arpo_sft), train.jsonl (arpo_rl) and facts.jsonl when present, in --task-dir. "
        "Works on your own data in those layouts (`task init` writes them) as on `task generate`'s; a tool tag the "
        "text uses often (e.g. <convert>) becomes one token. For trying a pipeline on CPU, not for real training.",
    )
    p.add_argument("output_dir")
    p.add_argument("--task-dir", required=True, help="folder with sft.jsonl / train.jsonl (your own data, or "
                   "written by `task init` or `task generate`)")  # fmt: skip
    p.add_argument("--size", default="demo", help="demo | test | gpu (see llamafactory_agentic.tasks.model)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_build_model)

    p = sub.add_parser("eval", help="greedy held-out accuracy and tool calls per question of one or more models")
    p.add_argument("models", nargs="+", help="model folders")
    p.add_argument("--data", required=True, help="arpo_rl rows (.jsonl or .parquet), e.g. DIR/heldout.jsonl")
    p.add_argument("--search-index", help="local search index folder, e.g. DIR/search_index")
    p.add_argument("--max-samples", type=int)
    p.add_argument("--template", default="qwen")
    p.add_argument("--max-response-length", type=int, default=256)
    p.add_argument("--max-tool-calls", type=int, default=3)
    p.add_argument("--search-topk", type=int, default=DEFAULT_SEARCH_TOPK)
    p.add_argument("--reward", default="em")
    p.add_argument("--device", help="torch device, e.g. cpu or cuda:0 (default: the first visible GPU, else the CPU)")
    p.add_argument("--tool-config", help="tool config (agentic_tool_config), e.g. with python_session")
    p.add_argument("--by-kind", action="store_true", help="also print accuracy per question kind")
    p.add_argument("--json", help="write the results to this file")
    p.set_defaults(func=_cmd_eval)
