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
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import __version__


def _package_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def _probe_activation_in_subprocess() -> dict:
    """Import LLaMA-Factory in a fresh interpreter (as `llamafactory-cli` would) and report what got patched."""
    code = (
        "import json, sys\n"
        "import llamafactory.train.tuner, llamafactory.data, llamafactory.extras.constants\n"
        "from llamafactory_agentic.integration.activation import active_patches, hook_installed\n"
        "print(json.dumps({'hook': hook_installed(), 'patches': active_patches()}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return {"hook": False, "patches": [], "error": proc.stderr.strip().splitlines()[-1:] or ["unknown error"]}

    return json.loads(proc.stdout.strip().splitlines()[-1])


def doctor(args: argparse.Namespace) -> int:
    r"""Print versions, active patches and optional parts; return 1 when activation is broken."""
    from .integration.activation import DISABLE_ENV, is_disabled
    from .integration.patches import PATCHES, SUPPORTED_LLAMAFACTORY

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

    try:
        tools = importlib.import_module("llamafactory_agentic.tools")
        isolation = getattr(tools, "isolation_level", None)
        if isolation is not None:
            print(f"[info] python tool isolation: {isolation()}")
    except Exception as err:  # the doctor reports, it never crashes on an optional part
        print(f"[no  ] python tool isolation: {err}")

    print("\nresult: " + ("ok" if ok else "activation is broken (see FAIL lines)"))
    return 0 if ok else 1


def build_tiny(args: argparse.Namespace) -> int:
    r"""Build the tiny local model used by the demo and the tests."""
    from .testing import build_tiny_model

    print(build_tiny_model(args.output_dir))
    return 0


def demo(args: argparse.Namespace) -> int:
    r"""The README's main job: build a tiny model, then run the tiny recipes in order with `llamafactory-cli train`."""
    repo = Path(__file__).resolve().parents[1]
    recipes = [repo / "recipes" / "tiny" / name for name in args.recipes]
    missing = [str(r) for r in recipes if not r.is_file()]
    if missing:
        print(f"recipes not found: {missing} (run the demo from a clone of the repository)", file=sys.stderr)
        return 2

    model_dir = repo / "saves" / "tiny-qwen2"
    if not (model_dir / "config.json").is_file():
        build_tiny(argparse.Namespace(output_dir=str(model_dir)))

    env = dict(os.environ)
    shared = Path(env.setdefault("AGENTIC_SHARED_DATA", str(repo.parent / "shared" / "data")))
    link = repo / "data" / "arpo"
    if not link.exists():
        if not (shared / "arpo" / "rl").is_dir():
            print(
                f"ARPO data not found at {shared / 'arpo'}: set AGENTIC_SHARED_DATA to the folder holding arpo/rl/*.parquet "
                "and arpo/search_cache.json",
                file=sys.stderr,
            )
            return 2

        link.symlink_to(shared / "arpo", target_is_directory=True)
        print(f"linked {link} -> {shared / 'arpo'}")

    index_dir = repo / "saves" / "search_index"
    if not (index_dir / "corpus.jsonl").is_file():
        from .tools.index import build_corpus_from_cache_json

        print("search index:", build_corpus_from_cache_json(link / "search_cache.json", index_dir))

    cli = shutil.which("llamafactory-cli") or "llamafactory-cli"
    for recipe in recipes:
        print(f"\n=== llamafactory-cli train {recipe.relative_to(repo)}", flush=True)
        proc = subprocess.run([cli, "train", str(recipe.relative_to(repo))], cwd=repo, env=env)
        if proc.returncode != 0:
            return proc.returncode

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

    p = subparsers.add_parser("demo", help="the README's main job: tiny agentic SFT, then ARPO, on CPU")
    p.add_argument("--recipes", nargs="+", default=["agentic_sft_cpu.yaml", "arpo_cpu.yaml"])
    p.set_defaults(func=demo)

    from .tasks.cli import add_subcommands as add_task_subcommands
    from .tools.cli import add_subcommands as add_tool_subcommands

    add_tool_subcommands(subparsers)
    add_task_subcommands(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    r"""Entry point of the `llamafactory-agentic` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 0

    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
