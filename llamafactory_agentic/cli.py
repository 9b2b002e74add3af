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

"""`llamafactory-agentic`: the plugin's own commands (training itself stays `llamafactory-cli train`)."""

import argparse
import json
import os
import shutil
import subprocess
import sys

from . import __version__


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _probe_activation_in_subprocess() -> dict:
    """Import LLaMA-Factory in a fresh interpreter (as `llamafactory-cli` would) and report what got patched.

    Returns:
        `{"hook": bool, "patches": [patched module names]}`, plus `"llamaboard_error"` when LLaMA-Board's interface
        (`llamafactory-cli webui`) cannot be imported, and `"error"` when the probe itself failed.
    """
    code = (
        "import json, sys\n"
        "import llamafactory.train.tuner, llamafactory.data, llamafactory.extras.constants, llamafactory.launcher\n"
        "from llamafactory_agentic.integration.activation import active_patches, hook_installed\n"
        "out = {}\n"
        "try:\n"
        "    import llamafactory.webui.interface\n"
        "except Exception as err:\n"
        "    out['llamaboard_error'] = f'{type(err).__name__}: {err}'\n"
        "out.update(hook=hook_installed(), patches=active_patches())\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return {"hook": False, "patches": [], "error": proc.stderr.strip().splitlines()[-1:] or ["unknown error"]}

    return json.loads(proc.stdout.strip().splitlines()[-1])


def _report_python_isolation() -> None:
    r"""Print what the python tool's sandbox probe measured inside each sandbox; flag a level below the default min."""
    print("\npython tool sandbox (measured by a probe that runs inside the sandbox exactly as model code does)")
    try:
        from .tools.sandbox.isolation import (
            DEFAULT_MIN_ISOLATION,
            SANDBOXES,
            IsolationError,
            check_min_isolation,
            level_rank,
            measure_isolation,
            min_isolation_hint,
            per_call_limits,
            probe_sandbox,
        )

        report = measure_isolation()
    except Exception as err:  # the doctor reports, it never crashes on an optional part
        print(f"[no  ] python tool isolation: could not be measured: {err}")
        return

    refusal = None
    try:  # the bar train and eval apply by default (level, network, processes left after the call)
        check_min_isolation(report, DEFAULT_MIN_ISOLATION)
    except IsolationError as exc:
        refusal = str(exc)
    enough = refusal is None

    def _who(r) -> str:
        if r.per_call_uid:
            return "code as a uid of its own per call"
        return "code as uid 65534" if r.as_nobody else f"code as uid {os.geteuid()}"

    who = _who(report)
    print(f"[{'ok' if enough else 'WARN':<4}] python tool isolation: {report.level} ({report.sandbox}, {who})")
    print(f"       measured inside the sandbox: {report.describe().split(': ', 1)[1]}")
    print("       per sandbox (agentic_python_isolation or AGENTIC_PYTHON_ISOLATION picks one):")
    for sandbox in SANDBOXES:
        forced = measure_isolation(sandbox)
        line = "unavailable" if forced.sandbox != sandbox else forced.level
        if forced.sandbox == sandbox:
            line += ", " + _who(forced)
        dropped = probe_sandbox(sandbox)
        if not dropped.usable:
            line += f" ({'as an unprivileged uid: ' if os.geteuid() == 0 else ''}{dropped.error[:200]})"
        print(f"         {sandbox:<13} {line}")
    print(
        f"       per-call limits at {report.sandbox} (python tool defaults; params memory_mb, max_processes, "
        "max_file_mb, disk_mb):"
    )
    for name, text in per_call_limits(report):
        print(f"         {name:<15}{text}")
    if not enough and report.rank < level_rank(DEFAULT_MIN_ISOLATION):
        print(
            f"[WARN] {report.level} is below agentic_python_min_isolation's default ({DEFAULT_MIN_ISOLATION}): "
            f"`arpo`/`aepo` recipes with the python tool refuse to start. To get a stronger level: "
            f"{min_isolation_hint(report)} To accept it: `agentic_python_min_isolation: none`."
        )
    elif not enough:  # the level suffices, but the code reached the network or outlived the call
        print(f"[WARN] `arpo`/`aepo` recipes with the python tool refuse to start: {refusal}")


def doctor(args: argparse.Namespace) -> int:
    r"""Print versions, active patches and optional parts; return 1 when activation is broken."""
    from .common.switch import DISABLE_ENV, is_disabled
    from .integration.patches import LLAMABOARD_PATCHES, PATCHES, SUPPORTED_LLAMAFACTORY

    ok = True
    print(f"llamafactory-agentic {__version__}")
    print(f"python        {sys.version.split()[0]} ({sys.executable})")
    for name in ("llamafactory", "transformers", "trl", "torch", "torchvision", "torchaudio", "peft", "accelerate"):
        print(f"{name:<13} {_package_version(name) or 'not installed'}")

    lf_version = _package_version("llamafactory")
    if lf_version not in SUPPORTED_LLAMAFACTORY:
        ok = False
        print(f"[FAIL] llamafactory {lf_version} is not supported (supported: {', '.join(SUPPORTED_LLAMAFACTORY)})")

    print("\nactivation")
    if is_disabled():
        print(f"[OFF ] disabled by {DISABLE_ENV}; unset it to activate the plugin")
    else:
        probe = _probe_activation_in_subprocess()
        print(f"[{'ok' if probe['hook'] else 'FAIL':<4}] start-up hook (llamafactory_agentic.pth)")
        for module, (what, _) in PATCHES.items():
            active = module in probe["patches"]
            ok &= active
            print(f"[{'ok' if active else 'FAIL':<4}] {module}: {what}")
        for module, (what, _) in LLAMABOARD_PATCHES.items():  # applied when LLaMA-Board's interface is imported
            if "llamaboard_error" in probe:  # LLaMA-Board itself does not load here: nothing to patch
                print(f"[no  ] {module}: {what} (LLaMA-Board cannot be imported: {probe['llamaboard_error']})")
                continue
            active = module in probe["patches"]
            ok &= active
            print(f"[{'ok' if active else 'FAIL':<4}] {module}: {what}")

        if "error" in probe:
            print(f"       error: {probe['error'][0]}")

        ok &= probe["hook"]

    print("\noptional parts")
    optional = {
        "vllm (rollout backend, extra [vllm])": _package_version("vllm"),
        "deepspeed (extra [deepspeed])": _package_version("deepspeed"),
        "redis (cache backend client)": _package_version("redis"),
        "redis-server (binary)": shutil.which("redis-server"),
        "bubblewrap (python tool sandbox)": shutil.which("bwrap"),
    }
    for what, found in optional.items():
        print(f"[{'yes' if found else 'no':<4}] {what}{': ' + found if found else ''}")

    try:
        import torch

        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        print(f"[{'yes' if gpus else 'no':<4}] GPU: {gpus} CUDA device(s)")
    except ImportError:
        print("[no  ] GPU: torch not importable")

    _report_python_isolation()

    print("\nresult: " + ("ok" if ok else "activation is broken (see FAIL lines)"))
    return 0 if ok else 1


def build_tiny(args: argparse.Namespace) -> int:
    r"""Build the tiny local model used by the demo and the tests."""
    from .testing import build_tiny_model

    print(build_tiny_model(args.output_dir))
    return 0


def demo(args: argparse.Namespace) -> int:
    r"""The README's main job: synthetic task, local model, agentic SFT then RL on CPU, and a held-out table."""
    from .tasks.demo import run_demo

    try:
        run_demo(
            workdir=args.workdir,
            seed=args.seed,
            stage=args.stage,
            arpo_data=args.arpo_data,
            sft_steps=args.sft_steps,
            rl_steps=args.rl_steps,
            extra_rl=args.rl_override,
        )
    except (RuntimeError, FileNotFoundError, ValueError) as err:
        print(f"demo failed: {err}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    r"""The argument parser of `llamafactory-agentic` (subcommands register themselves here)."""
    parser = argparse.ArgumentParser(
        prog="llamafactory-agentic",
        description="Commands of the llamafactory-agentic plugin. Train with `llamafactory-cli train recipe.yaml`.",
    )
    parser.add_argument("--version", action="version", version=f"llamafactory-agentic {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = subparsers.add_parser(
        "doctor", help="versions, active patches, optional parts; exit 1 if activation is broken"
    )
    p.set_defaults(func=doctor)

    p = subparsers.add_parser("build-tiny-model", help="build the tiny local Qwen2 model used by the demo and tests")
    p.add_argument("output_dir", nargs="?", default="saves/tiny-qwen2")
    p.set_defaults(func=build_tiny)

    p = subparsers.add_parser(
        "demo",
        help="the README's main job: agentic SFT then ARPO on the synthetic tool-use task, on CPU, with a table",
        description="Generate the synthetic tool-use task, build a small model locally, cold-start it with agentic "
        "SFT, train it with ARPO (or another preset) through `llamafactory-cli train`, and print held-out accuracy "
        "and tool calls per question of both models. Needs nothing outside the installed package.",
    )
    p.add_argument("--workdir", default="saves/demo", help="working directory for every output")
    p.add_argument("--seed", type=int, default=0, help="seed of the task, the model and both runs")
    p.add_argument("--stage", default="arpo", choices=("arpo", "grpo", "aepo", "aepo-paper"), help="RL preset")
    p.add_argument("--arpo-data", metavar="DIR", help="train the RL stage on ARPO's released rows in DIR "
                   "(rl/train_10k.parquet, rl/valid.parquet, search_cache.json) instead of the synthetic task")  # fmt: skip
    p.add_argument("--sft-steps", type=int, help="override the cold start's max_steps (the recipe's 1000; with "
                   "fewer, some seeds' cold starts still miscopied ids, and RL gained less)")  # fmt: skip
    p.add_argument("--rl-steps", type=int, help="override the RL run's max_steps")
    p.add_argument("--rl-override", nargs="*", default=[], metavar="KEY=VALUE", help="more RL recipe overrides")
    p.set_defaults(func=demo)

    from .evaluation.cli import add_subcommands as add_eval_subcommands
    from .guards.gaming import add_subcommand as add_gaming_subcommand
    from .guards.plan import add_subcommand as add_plan_subcommand
    from .rollout.server_launch import add_subcommand as add_rollout_server_subcommand
    from .tasks.cli import add_subcommands as add_task_subcommands
    from .tools.cli import add_subcommands as add_tool_subcommands

    add_tool_subcommands(subparsers)
    add_task_subcommands(subparsers)
    add_eval_subcommands(subparsers)
    add_plan_subcommand(subparsers)
    add_gaming_subcommand(subparsers)
    add_rollout_server_subcommand(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    r"""Entry point of the `llamafactory-agentic` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0

    if args.command == "eval":  # the harness parses with the plugin's keys: activate it without the start-up hook
        from .integration.activation import hook_installed, is_disabled, register

        if not hook_installed() and not is_disabled():  # disabled: the harness says so (EvalConfigError)
            register()

    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
