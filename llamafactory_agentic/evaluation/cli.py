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

r"""The `eval` command, shared by `llamafactory-agentic eval ...` and `llamafactory-cli eval ...`.

* `eval CONFIG.yaml [key=value ...]`: evaluate (resumes in `eval_output_dir`);
* `eval compare A B [--output FILE] [--samples N]`: compare two finished runs;
* `eval merge DIR`: judge and aggregate a sharded run once all shards are done (shards also do it when they end);
* `eval -h`: the `eval_*` keys with their help text.
"""

import argparse
import json
import sys
from pathlib import Path


EXIT_ERRORS = 3  # generation or judge errors past eval_max_error_rate (docs/algorithms.md section 9)
USAGE = """usage:
  eval CONFIG.yaml [key=value ...]     evaluate a model (see evaluation/README.md); resumes in eval_output_dir
  eval compare RUN_A RUN_B [--output FILE] [--samples N]
                                       paired comparison of two finished runs with the same protocol fingerprint
  eval merge OUTPUT_DIR                judge and aggregate a sharded run once every shard has finished
  eval table RUN_DIR... [--output DIR] [--labels A,B,...] [--profile current|reference]
                                       checkpoints x benchmarks in the layout of the papers' Tables 1 and 2
                                       (pass@1 ± std, pass@k, group averages; table.md, table.csv, table.html)

exit codes: 0 done; 1 a shard finished but the run is not complete yet; 2 bad configuration or input;
  3 generation or judge errors past eval_max_error_rate (default 0: any error). Errors are never scored;
  running the same command again retries them.
"""


def _print_result(metrics: dict) -> None:
    if not metrics.get("complete"):
        print(
            f"[agentic-eval] {metrics['records']}/{metrics['expected']} records of the run exist. "
            "The last shard to finish (or `eval merge DIR`) writes the results."
        )
        for shard in metrics.get("shards", []):
            state = "has not started (no file)" if not shard["exists"] else "is not finished"
            print(
                f"[agentic-eval] shard {shard['shard']} ({shard['file']}) {state}: {shard['missing']} of its "
                f"{shard['expected']} records missing; run it with eval_shard={shard['shard']}",
                file=sys.stderr,
            )
        return
    for name, bench in metrics["benchmarks"].items():
        p1 = bench["pass@1"]
        value = "n/a" if p1["mean"] is None else f"{100 * p1['mean']:.1f} ± {100 * p1['std']:.1f}"
        r1 = bench["reference"]["pass@1"]
        ref = "n/a" if r1["mean"] is None else f"{100 * r1['mean']:.1f} ± {100 * r1['std']:.1f}"
        errors = bench["errors"]["generation"] + bench["errors"]["judge"]
        print(
            f"[agentic-eval] {name}: {bench['headline_metric']} pass@1 {value} (reference scoring {ref}) over "
            f"{bench['runs_complete']} runs, "
            f"{bench['n_questions']} questions" + (f", {errors} error records not scored" if errors else "")
        )
    for name, group in metrics["groups"].items():
        total = len(group["members"]) + len(group["missing"])
        print(
            f"[agentic-eval] group {name}: {100 * group['pass@1']:.1f} (average over {len(group['members'])} of {total} sets)"
        )
    from .metrics import error_banner

    banner = error_banner(metrics)
    if banner:
        print(f"[agentic-eval] {banner}", file=sys.stderr)


def _exit_code(metrics: dict) -> int:
    r"""0 when done within `eval_max_error_rate`, 3 past it (EXIT_ERRORS), 1 for a shard whose run is not complete."""
    if not metrics.get("complete"):
        return 1
    return EXIT_ERRORS if (metrics.get("errors") or {}).get("exceeded") else 0


def run_eval_command(argv: list[str]) -> int:
    r"""Run `eval` with the arguments after the word `eval`; returns the exit code."""
    from .benchmarks import BenchmarkError
    from .compare import CompareError
    from .config import EvalConfigError, format_help
    from .records import ResumeError

    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE + "\nevaluation keys (plus LLaMA-Factory's model keys and the plugin's agentic_* tool keys):")
        print(format_help())
        return 0 if argv else 2
    try:
        if argv[0] == "compare":
            parser = argparse.ArgumentParser(prog="eval compare")
            parser.add_argument("run_a")
            parser.add_argument("run_b")
            parser.add_argument("--output", default=None, help="Also write the comparison here (.md or .json).")
            parser.add_argument("--samples", type=int, default=10000, help="Bootstrap resamples (default 10000).")
            parser.add_argument("--seed", type=int, default=0)
            args = parser.parse_args(argv[1:])
            from .compare import compare_runs, format_comparison

            result = compare_runs(args.run_a, args.run_b, samples=args.samples, seed=args.seed)
            text = format_comparison(result)
            print(text)
            if args.output:
                out = Path(args.output)
                out.write_text(json.dumps(result, indent=2) if out.suffix == ".json" else text, encoding="utf-8")
            return 0
        if argv[0] == "table":
            parser = argparse.ArgumentParser(prog="eval table")
            parser.add_argument("runs", nargs="+", help="output folders of finished runs, one row each")
            parser.add_argument("--output", default=None, help="folder for table.md, table.csv and table.html")
            parser.add_argument("--labels", default=None, help="comma-separated row labels (default: model names)")
            parser.add_argument("--profile", default="current", choices=("current", "reference"))
            args = parser.parse_args(argv[1:])
            from .table import build_table, format_markdown, write_table

            labels = [x.strip() for x in args.labels.split(",")] if args.labels else None
            data = build_table(args.runs, labels, args.profile)
            print(format_markdown(data))
            if args.output:
                for path in write_table(data, args.output):
                    print(f"[agentic-eval] wrote {path}")
            return 0
        if argv[0] == "merge":
            if len(argv) != 2:
                print(USAGE, file=sys.stderr)
                return 2
            from .runner import finalize

            metrics = finalize(argv[1])
            _print_result(metrics)
            return _exit_code(metrics)
        from .runner import evaluate

        metrics = evaluate(argv[0], argv[1:])
        _print_result(metrics)
        return _exit_code(metrics)  # 1 while other shards are still missing (USAGE)
    except (EvalConfigError, BenchmarkError, ResumeError, CompareError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def add_subcommands(subparsers: argparse._SubParsersAction) -> None:
    r"""Register `eval` on the `llamafactory-agentic` parser (the rest of the line goes to `run_eval_command`)."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate a model on benchmarks (eval CONFIG.yaml, eval compare A B, eval merge DIR, eval table RUN...)",
        add_help=False,
        prefix_chars="\0",  # every word after `eval` (also -h, --output) goes to run_eval_command
    )
    p.add_argument("eval_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=lambda args: run_eval_command(args.eval_args))
