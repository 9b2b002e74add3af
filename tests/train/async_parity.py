# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""A short real ARPO run whose log history and final weights must not change with the default settings (issue 36).

`run_parity(workdir)` fits the tiny model into a tool-calling policy (`_helpers.fit_tool_policy`), then runs the real
`llamafactory-cli train recipes/tiny/arpo_cpu.yaml` for 3 optimiser steps on CPU: 2 prompts x M = 4 per rollout and 4
trajectories per update, so the first rollout feeds 2 updates (the recomputed old log-probs) and the second rollout
runs after 2 updates (the weight sync); dynamic sampling, the real python and search tools, branching and validation
are on. It returns the log history without the wall-clock and memory fields, and a SHA-256 of the final weights.

Run as a script (`python tests/train/async_parity.py OUT_DIR`) it prints that result as JSON: the expected values of
`test_async_parity.py` were recorded that way with `PYTHONPATH=/work/main` on the code before the rollout seam.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SHARED_DATA = Path(os.environ.get("AGENTIC_SHARED_DATA", REPO.parent / "shared" / "data"))
if not (SHARED_DATA / "arpo").is_dir():
    SHARED_DATA = Path("/work/shared/data")


def _dropped(key: str) -> bool:
    # wall-clock, throughput and memory values differ from run to run, and so do the tool cache's write counters (its
    # writer thread stores a result whenever it gets to it); everything else must be identical
    return (
        (key.startswith(("tools/cache/", "eval_tools/cache/")) and key.rsplit("/", 1)[-1] in ("pending", "written"))
        or key.startswith(("time/", "memory/", "eval_time/"))
        or "latency" in key
        or key.endswith(("_per_second", "_runtime", "_s", "_ms"))
        or key in ("elapsed_time", "remaining_time", "percentage", "eval_runtime", "train_runtime")
        # a counter added after the recording (issue 34: calls the executor gave up on); 0 in these runs
        or (key.startswith(("tools/", "eval_tools/")) and key.endswith("/abandoned"))
    )


def log_history(out: Path) -> list[dict]:
    r"""`trainer_log.jsonl` records without the fields `_dropped` names, floats rounded to 6 significant digits."""
    records = []
    for line in (out / "trainer_log.jsonl").read_text().splitlines():
        record = json.loads(line)
        records.append(
            {
                k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                for k, v in sorted(record.items())
                if not _dropped(k)
            }
        )
    return records


def weights_sha256(out: Path) -> str:
    r"""SHA-256 over the final model's tensors (sorted by name; name, dtype, shape and bytes of each)."""
    from safetensors.torch import load_file

    digest = hashlib.sha256()
    tensors = {}
    for path in sorted(out.glob("*.safetensors")):
        tensors.update(load_file(str(path)))
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        digest.update(t.view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return digest.hexdigest()


def prepare(root: Path) -> dict:
    r"""Data folder, tool-calling policy and search index under `root` (as `test_arpo_e2e.e2e_env` builds them)."""
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _helpers import fit_tool_policy  # noqa: E402

    from llamafactory_agentic.testing import build_tiny_model
    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    root.mkdir(parents=True, exist_ok=True)
    datasets = root / "datasets"
    datasets.mkdir(exist_ok=True)
    shutil.copy(REPO / "data" / "dataset_info.json", datasets / "dataset_info.json")
    if not (datasets / "arpo").exists():
        (datasets / "arpo").symlink_to(SHARED_DATA / "arpo", target_is_directory=True)
    rows = pq.read_table(SHARED_DATA / "arpo" / "rl" / "train_10k.parquet").slice(0, 16).to_pylist()
    tiny = build_tiny_model(root / "tiny")
    policy = root / "policy"
    fit_tool_policy(tiny, policy, rows, steps=120, context=48)
    search_index = root / "search_index"
    build_corpus_from_cache_json(SHARED_DATA / "arpo" / "search_cache.json", search_index)
    return {"datasets": datasets, "policy": policy, "search_index": search_index}


REWARD = """def score(model_text, ground_truth, metadata):
    # a reward that differs between trajectories of a group, so that the updates move the weights
    return (len(model_text) % 3) / 2.0
"""


def cli_env(root: Path) -> dict:
    r"""Environment of a `llamafactory-cli` run: this venv's `bin` first, `root` importable (the reward), the plugin on."""
    python_path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", PYTHONPATH=python_path)
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    return env


def prepare_with_reward(root: Path) -> dict:
    r"""`prepare(root)` plus the parity reward module `root/parity_reward.py` (`agentic_reward=parity_reward:score`)."""
    env_paths = prepare(root)
    (root / "parity_reward.py").write_text(REWARD)
    return env_paths


def run_parity(root: Path, extra_args: tuple[str, ...] = (), timeout: int = 900) -> dict:
    r"""Run the 3-step ARPO job in `root/out` and return `{"log": [...], "weights_sha256": ...}`."""
    from llamafactory_agentic.tools.cache import normalize_args, open_cache

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _helpers import SEARCH_QUERY, SEARCH_RESULT  # noqa: E402

    env_paths = prepare(root)
    out = root / "out"
    out.mkdir(exist_ok=True)
    cache_path = out / "tool_cache.sqlite"
    cache = open_cache(str(cache_path))
    cache.put("search", normalize_args("search", SEARCH_QUERY), SEARCH_RESULT)
    cache.close()
    cmd = [
        str(BIN / "llamafactory-cli"),
        "train",
        str(REPO / "recipes/tiny/arpo_cpu.yaml"),
        f"model_name_or_path={env_paths['policy']}",
        f"dataset_dir={env_paths['datasets']}",
        f"output_dir={out}",
        f"agentic_cache_path={cache_path}",
        f"agentic_search_index={env_paths['search_index']}",
        "max_steps=3",
        "save_strategy='no'",  # YAML reads a bare no as false
        "plot_loss=false",
        "eval_steps=3",
        "rl_dynamic_sampling=true",
        "rl_dynamic_sampling_max_batches=2",
        "agentic_reward=parity_reward:score",
        *extra_args,
    ]
    (root / "parity_reward.py").write_text(REWARD)
    proc = subprocess.run(cmd, cwd=REPO, env=cli_env(root), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return {"log": log_history(out), "weights_sha256": weights_sha256(out)}


if __name__ == "__main__":
    result = run_parity(Path(sys.argv[1]))
    print(json.dumps(result, indent=1, sort_keys=True))
