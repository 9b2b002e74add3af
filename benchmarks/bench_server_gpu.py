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

"""ARPO on one GPU with the rollout on vLLM's own server, against the in-process engines, in one run (issue 36).

    python benchmarks/bench_server_gpu.py --out DIR [--modes hf,vllm,server,server_async] [--fraction 0.3]
    python benchmarks/bench_server_gpu.py --out DIR --smoke --modes hf,server,server_async   # CPU check (stand-in)

Random-weight Qwen2.5-0.5B shape (`_single_gpu.build_model`, no model hub), synthetic prompts without tools, the
same recipe for every mode (`_single_gpu.recipe`), `llamafactory-cli train` per mode:

* `hf`: the plugin's engine, decoding with the trained module (lockstep; the baseline of every ratio);
* `vllm`: colocated vLLM in the trainer's process (sleep mode, `--fraction` of the GPU);
* `server`: `arpo_rollout_backend: vllm_server`, lockstep: vLLM's own server on `--fraction` of the same GPU, started
  once by `llamafactory-agentic rollout-server` (its `vllm serve` line is printed), weights pushed over CUDA IPC after
  every optimiser step;
* `server_async`: the same server with `rl_max_staleness: 1` (the producer rolls out batch j+1 during batch j's
  updates).

Per mode: mean `time/step` over all steps and over the steady steps (after the first generation batch), mean rollout
seconds, the forward/backward seconds (`time/training`) of the first update of each generation batch against the
later ones (the first-update slowdown) and the old-log-prob pass (`time/advantage_and_logprobs`), generated tokens
per rollout second, the weight push's seconds, the trainer's peak allocated memory, and the GPU's peak used memory
over all processes (`nvidia-smi`, sampled every 0.5 s during the run, the server included); ratios against `hf`
measured in the same run. `--smoke` runs on the CPU with the test stand-in for vLLM's server
(`tests/rollout/vllm_standin.py`, disk weight transfer): it checks this script's path, not speed. Writes
`DIR/results.jsonl`, `DIR/summary.csv`, the runs' logs under `DIR/logs/` and the weight-push log lines in
`DIR/push_lines.txt`.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))

from _single_gpu import REPO, Results, build_model, cuda, prompt_texts, recipe, run_train, write_dataset  # noqa: E402


class GpuMemory:
    r"""Peak `memory.used` of GPU 0 over all processes (MiB, `nvidia-smi`), sampled every 0.5 s while open."""

    def __init__(self) -> None:
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                                      "-i", "0"], capture_output=True, text=True, timeout=5).stdout  # fmt: skip
                value = float(out.strip().splitlines()[0])
                self.peak_mib = max(self.peak_mib or 0.0, value)
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                return
            self._stop.wait(0.5)

    def __enter__(self) -> "GpuMemory":
        if cuda():
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()


def wait_ready(url: str, proc: subprocess.Popen, timeout: float) -> float:
    r"""Seconds until `GET {url}/models` answers; raises when the server process ends or `timeout` passes."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the rollout server exited with {proc.returncode} before it answered")
        try:
            with urllib.request.urlopen(url + "/models", timeout=2) as response:  # noqa: S310 (loopback, ours)
                if response.status == 200:
                    return time.perf_counter() - start
        except OSError:
            time.sleep(1.0)
    raise TimeoutError(f"the rollout server did not answer within {timeout:.0f} s")


def start_server(args: argparse.Namespace, model_dir: Path, max_len: int, log: Path) -> tuple[subprocess.Popen, str]:
    r"""Start the rollout server (vLLM through `rollout-server`, or the stand-in with `--smoke`); returns it and its URL."""
    if args.smoke:
        cmd = [sys.executable, str(REPO / "tests" / "rollout" / "vllm_standin.py"), str(model_dir), "--port",
               str(args.port)]  # fmt: skip
    else:
        cmd = [sys.executable, "-m", "llamafactory_agentic.cli", "rollout-server", "--model", str(model_dir),
               "--port", str(args.port), "--gpu-memory-utilization", str(args.fraction), "--max-model-len",
               str(max_len), *args.server_args.split()]  # fmt: skip
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env.setdefault("PYTHONPATH", str(REPO))
    handle = open(log, "w", encoding="utf-8")  # noqa: SIM115 (kept open for the server's life)
    proc = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=False)
    url = f"http://127.0.0.1:{args.port}/v1"
    seconds = wait_ready(url, proc, args.server_timeout)
    first = log.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
    print(f"rollout server ready in {seconds:.1f} s: {first[0] if first else cmd}", flush=True)
    return proc, url


def summarise(records: list[dict], updates: int) -> dict:
    r"""Step, rollout, token and memory figures of one run's `trainer_log.jsonl` records."""

    def mean(values: list[float]) -> float | None:
        return sum(values) / len(values) if values else None

    steps = [r for r in records if isinstance(r.get("time/step"), (int, float))]
    rollouts = [r for r in steps if isinstance(r.get("time/step_rollout_total"), (int, float))]
    tokens = sum(float(r.get("rollout/generated_tokens", 0.0)) for r in rollouts)
    rollout_s = sum(float(r["time/step_rollout_total"]) for r in rollouts)
    staleness = [float(r["async/staleness_max"]) for r in steps if "async/staleness_max" in r]
    pushes = [float(r["time/weight_push"]) for r in steps if "time/weight_push" in r]
    peaks = [float(r["perf/peak_gpu_memory_gib"]) for r in steps if "perf/peak_gpu_memory_gib" in r]
    # forward/backward seconds of each update; the first of each generation batch used to carry the old-log-prob
    # pass's queued kernels (pipeline.wait_for_stream)
    training = [float(r["time/training"]) for r in steps if isinstance(r.get("time/training"), (int, float))]
    first = [t for i, t in enumerate(training) if i % max(updates, 1) == 0]
    later = [t for i, t in enumerate(training) if i % max(updates, 1) != 0]
    logprob_pass = [float(r["time/advantage_and_logprobs"]) for r in rollouts if "time/advantage_and_logprobs" in r]
    return {
        "steps": len(steps),
        "step_s": mean([float(r["time/step"]) for r in steps]),
        "steady_step_s": mean([float(r["time/step"]) for r in steps[updates:]]),
        "rollout_s": mean([float(r["time/step_rollout_total"]) for r in rollouts]),
        "tokens_per_s": tokens / rollout_s if rollout_s else None,
        "generated_tokens": tokens,
        "weight_push_s": mean(pushes),
        "trainer_peak_gib": max(peaks) if peaks else None,
        "staleness_max": max(staleness) if staleness else None,
        "first_update_training_s": mean(first),
        "later_update_training_s": mean(later),
        "advantage_and_logprobs_s": mean(logprob_pass),
        "step_times": [round(float(r["time/step"]), 3) for r in steps],
        "training_times": [round(t, 3) for t in training],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="bench_out/server")
    parser.add_argument("--work", default="/tmp/agentic_server")
    parser.add_argument("--modes", default="hf,vllm,server,server_async")
    parser.add_argument("--size", default="qwen2.5-0.5b")
    parser.add_argument("--fraction", type=float, default=0.3, help="GPU memory share of vLLM (server and colocated)")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--server-args", default="", help="more `vllm serve` arguments, space-separated")
    parser.add_argument("--server-timeout", type=float, default=300.0)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=256)
    parser.add_argument("--response", type=int, default=512)
    parser.add_argument("--micro", type=int, default=16)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--finetuning", default="full", choices=["full", "lora"])
    parser.add_argument("--rollouts", type=int, default=2, help="generation batches per run (the first warms up)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per training run")
    parser.add_argument("--smoke", action="store_true", help="tiny shape on the CPU, the stand-in as the server")
    args = parser.parse_args()
    if args.smoke:
        args.prompts, args.group, args.prompt_length, args.response, args.micro, args.accum = 2, 4, 32, 16, 4, 1
    out = Path(args.out)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    results = Results(out)
    model_dir = build_model(work, args.size, args.smoke)
    data_dir = write_dataset(work, prompt_texts(model_dir, args.prompts, args.prompt_length))
    updates = args.prompts * args.group // (args.micro * args.accum)
    max_len = args.prompt_length + 64 + args.response
    modes = args.modes.split(",")
    server = url = None
    rows: dict[str, dict] = {}
    push_lines: list[str] = []
    try:
        if any(m.startswith("server") for m in modes):
            server, url = start_server(args, model_dir, max_len, out / "logs" / "server.log")
        for mode in modes:
            extra: dict = {"arpo_vllm_gpu_memory_utilization": args.fraction}
            if mode.startswith("server"):
                extra.update(arpo_rollout_backend="vllm_server", arpo_server_urls=url)
                # the stand-in has no weight-transfer engine (disk); vLLM on the trainer's GPU: CUDA IPC
                extra["arpo_server_weight_transfer"] = "disk" if args.smoke else "ipc"
            else:
                extra["arpo_rollout_backend"] = mode
            if mode.endswith("_async"):
                extra["rl_max_staleness"] = 1
            values = recipe(model_dir, data_dir, work / f"{mode}_out", prompts=args.prompts, group=args.group,
                            initial=max(args.group // 2, 1), prompt_length=args.prompt_length,
                            response=args.response, micro=args.micro, accum=args.accum,
                            steps=args.rollouts * updates, finetuning=args.finetuning, extra=extra)  # fmt: skip
            with GpuMemory() as memory:
                run = run_train(work, values, args.timeout, mode, logs=out / "logs")
            row = summarise(run["records"], updates)
            row.update(mode=mode, size=args.size, finetuning=args.finetuning, rc=run["rc"], wall_s=run["wall_s"],
                       gpu_peak_gib=memory.peak_mib / 1024 if memory.peak_mib else None)  # fmt: skip
            rows[mode] = results.add("mode", **row)
            push_lines += [f"[{mode}] {line}" for line in run["log"].splitlines() if "pushed to" in line]
            print(json.dumps(rows[mode]), flush=True)
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=60)
            except subprocess.TimeoutExpired:
                server.kill()
    (out / "push_lines.txt").write_text("\n".join(push_lines) + "\n", encoding="utf-8")
    base = rows.get("hf")
    for mode, row in rows.items():
        if base is None or mode == "hf":
            continue
        ratio = {"mode": mode}
        for key in ("step_s", "steady_step_s", "rollout_s", "tokens_per_s", "trainer_peak_gib", "gpu_peak_gib"):
            if row.get(key) and base.get(key):
                ratio[f"{key}_over_hf"] = row[key] / base[key]
        results.add("ratio", **ratio)
        print(json.dumps(ratio), flush=True)


if __name__ == "__main__":
    main()
