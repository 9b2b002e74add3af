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

"""Throughput of the evaluation harness (`llamafactory_agentic.evaluation.evaluate`).

CPU (default): the tiny local model through the `hf` engine under the `paper` protocol (stop strings, repetition
penalty, per-call budget `--new` tokens), the same `--samples` questions with 1, 8 and 64 samples in flight; prints
samples per second of the generation loop (records written, rule scoring included; model loading excluded) and the
ratio against 1 in flight measured in the same run.

`--gpu`: a random-weight real-size model (`testing.build_real_size_model`, default Qwen2.5-0.5B architecture) on
128 samples, 128 in flight, bf16 on one CUDA GPU. A random model never writes tool calls, so the policy is the model
plus a schedule that forces, by response position, `<search> ... </search>` (and `<python> ... </python>`) after a
stretch of freely sampled tokens, then `<answer> \\boxed{1} </answer>` and EOS (free tokens are sampled from the
model, restricted to the tokenizer's real vocabulary). Tool results come from a fixed-text executor (tool latency is
not measured). Two protocols in the same run, same model and schedule:
  * `paper`: stop strings `</search>`, `</python>`, `</answer>` sent to the engine, at most 4096 new tokens per call;
  * `reference`: no stop strings (RUC-NLPIR/ARPO `evaluation/`): every call runs to its 4096-token budget (or EOS) and
    the text after the first closing tag is thrown away afterwards, as the reference's client does.
Prints seconds, samples/s and generated tokens of each and the time ratio reference / paper.

Usage: `python benchmarks/bench_eval.py [--samples 64 --new 32]`; `python benchmarks/bench_eval.py --gpu
[--model qwen2.5-0.5b --samples 128 --tool-rounds 3 --think 64]`.
"""

import argparse
import json
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def write_questions(path: Path, n: int, width: int = 4) -> Path:
    rows = [
        {"question": f"Question {i:0{width}d}: what is the value of the expression?", "answer": "1"} for i in range(n)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def base_config(model_dir: Path, data: Path, out: Path, **extra) -> dict:
    config = {
        "model_name_or_path": str(model_dir),
        "template": "qwen",
        "agentic_search_backend": "replay",
        "agentic_cache_path": str(out.parent / "tool_cache.sqlite"),
        "agentic_cache_mode": "offline",
        "eval_preset": "paper",
        "eval_benchmarks": [{"name": "bench", "path": str(data), "task": "qa", "metric": "em"}],
        "eval_runs": 1,
        "eval_max_samples": -1,  # every generated question (the paper preset alone would cut at 500)
        "eval_progress": False,
        "eval_report": False,
        "eval_output_dir": str(out),
    }
    config.update(extra)
    return config


# ---------------------------------------------------------------------------------------------- CPU
def run_cpu(args: argparse.Namespace) -> None:
    import torch

    from llamafactory_agentic.evaluation import evaluate
    from llamafactory_agentic.testing import build_tiny_model

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = build_tiny_model(tmp / "tiny")
        data = write_questions(tmp / "questions.jsonl", args.samples)
        results = {}
        for in_flight in (1, 8, 64):
            config = base_config(
                model_dir,
                data,
                tmp / f"out{in_flight}",
                eval_batch_size=in_flight,
                eval_max_new_tokens=args.new,
                eval_max_response_length=args.new * 2,
            )
            metrics = evaluate(config)
            seconds = metrics["timing"]["generation"]["time/total"]
            tokens = metrics["timing"]["generation"].get("generated_tokens", 0.0)
            results[in_flight] = seconds
            print(
                f"tiny model, {args.samples} samples, {in_flight:>2} in flight: {seconds:7.2f} s, "
                f"{args.samples / seconds:7.2f} samples/s, {tokens / seconds:8.1f} generated tokens/s",
                flush=True,
            )
        for in_flight in (8, 64):
            print(f"speed-up {in_flight} vs 1 in flight: {results[1] / results[in_flight]:.2f}x")


# ---------------------------------------------------------------------------------------------- GPU
class ScheduledPolicy:
    r"""The real model plus a forced-token schedule by response position (see the module docstring).

    A row that generates into the positions where an observation belongs is past a tool call that was not stopped
    (the reference's behaviour): from there until its next round (the next prefill of its slot) nothing is forced and
    EOS is masked, so the call runs on to its token budget, as the reference's calls do.
    """

    def __init__(self, model, prompt_len: int, schedule, observations, base_vocab: int, slots: int):
        import torch

        self.inner = model
        self.config = model.config
        self.prompt_len = prompt_len
        device = next(model.parameters()).device
        table = torch.full((1 << 16,), -1, dtype=torch.long)
        for pos, token in schedule.items():
            table[pos] = token
        self.table = table.to(device)
        in_obs = torch.zeros((1 << 16,), dtype=torch.bool)
        for start, end in observations:
            in_obs[start:end] = True
        self.in_obs = in_obs.to(device)
        self.allowed = torch.zeros(model.config.vocab_size, dtype=torch.bool, device=device)
        self.allowed[3:base_vocab] = True  # real tokens, no special ids (EOS only when forced)
        self.over = torch.zeros(slots, dtype=torch.bool, device=device)  # per KV slot: running past a tool call

    def parameters(self):
        return self.inner.parameters()

    @property
    def training(self):
        return self.inner.training

    def eval(self):
        self.inner.eval()
        return self

    def train(self, mode: bool = True):
        self.inner.train(mode)
        return self

    def __call__(self, **kwargs):
        import torch

        out = self.inner(**kwargs)
        logits = out.logits[:, -1, :]
        batch = logits.shape[0]
        rel = (kwargs["position_ids"][:, -1] + 1 - self.prompt_len).clamp(0, self.table.numel() - 1)
        rows = kwargs["past_key_values"].rows  # the slots of a prefill; None in a decode step (slots 0..batch-1)
        if rows is not None:
            self.over[rows] = False  # a prefill starts a new round
            over = self.over[rows]
        else:
            self.over[:batch] |= self.in_obs[rel]
            over = self.over[:batch]
        forced = self.table[rel].masked_fill(over, -1)
        logits = logits.masked_fill(~self.allowed, float("-inf"))
        chosen = torch.zeros_like(logits, dtype=torch.bool).scatter_(
            1, forced.clamp(min=0)[:, None], (forced >= 0)[:, None]
        )
        out.logits = logits.masked_fill(chosen, 1e4).unsqueeze(1)
        return out


class FixedExecutor:
    def __init__(self, text: str):
        self.text = text

    def execute(self, calls):
        from llamafactory_agentic.tools import ToolResult

        return [ToolResult(self.text, "ok", 0.0) for _ in calls]

    def pop_metrics(self):
        return {}

    def close(self):
        pass


class NoStopEngine:
    r"""The reference's behaviour on top of an engine: no stop strings sent; the text after the first closing tag of a
    finished call is discarded afterwards (RUC-NLPIR/ARPO `evaluation/src/sample_processor.py`)."""

    def __init__(self, engine, tokenizer):
        self.engine, self.tokenizer = engine, tokenizer

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def generate(self, requests, sampling):
        from llamafactory_agentic.rollout import GenerationResult

        results = self.engine.generate(requests, replace(sampling, stop_strings=()))
        out = []
        for result in results:
            ids = result.token_ids
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            hits = [(text.find(s), s) for s in sampling.stop_strings if s in text]
            if not hits:
                out.append(result)
                continue
            _, stop = min(hits)
            keep = next(n for n in range(1, len(ids) + 1) if stop in self.tokenizer.decode(ids[:n]))
            out.append(GenerationResult(ids[:keep], result.entropy_terms, "stop", stop))
        return out


def run_gpu(args: argparse.Namespace) -> None:
    import torch
    from llamafactory.data import get_template_and_fix_tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llamafactory_agentic.evaluation import evaluate, parse_eval_config
    from llamafactory_agentic.evaluation.config import DEFAULT_SYSTEM_PROMPT
    from llamafactory_agentic.rollout.hf_engine import HFEngine
    from llamafactory_agentic.testing import build_real_size_model, build_tiny_model

    device = "cpu" if args.smoke else "cuda"
    assert device == "cpu" or torch.cuda.is_available(), "--gpu needs a CUDA GPU (or --smoke to check on CPU)"
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model_dir = build_tiny_model(tmp / "model") if args.smoke else build_real_size_model(tmp / "model", args.model)
        data = write_questions(tmp / "candidates.jsonl", args.samples * 20)
        response_budget = args.per_call * (args.tool_rounds + 2)

        def config(name: str) -> dict:
            return base_config(
                model_dir,
                data,
                tmp / name,
                eval_batch_size=args.samples,
                eval_max_new_tokens=args.per_call,
                eval_max_prompt_length=512,
                eval_max_response_length=response_budget,
                eval_sample_timeout=0,
            )

        setup = parse_eval_config(config("paper"))
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        template = get_template_and_fix_tokenizer(tokenizer, setup.data_args)
        # the schedule counts response positions from the prompt length: keep questions whose prompts have one length
        by_length: dict[int, list[str]] = {}
        for line in data.read_text().splitlines():
            question = json.loads(line)["question"]
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]
            ids = template.encode_oneturn(tokenizer, messages, DEFAULT_SYSTEM_PROMPT)[0]
            by_length.setdefault(len(ids), []).append(line)
        prompt_len, lines = max(by_length.items(), key=lambda kv: len(kv[1]))
        assert len(lines) >= args.samples, f"only {len(lines)} questions with a {prompt_len}-token prompt"
        data = tmp / "questions.jsonl"
        data.write_text("\n".join(lines[: args.samples]) + "\n", encoding="utf-8")
        added = [t for t in tokenizer.get_added_vocab().values() if t > 2]
        base_vocab = min([t for t in added if t >= 3 and tokenizer.convert_ids_to_tokens(t).startswith("<|extra")]
                         or [len(tokenizer)])  # fmt: skip
        eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        observation = "Page 1: The value of the expression is one."
        obs_len = len(tokenizer(" <result>\n" + observation + "\n</result>", add_special_tokens=False)["input_ids"])
        schedule, observations, pos = {}, [], 0
        calls = ["<search> value of the expression </search>", "<python> print(1) </python>"]
        for k in range(args.tool_rounds):
            pos += args.think
            ids = tokenizer(" " + calls[k % len(calls)], add_special_tokens=False)["input_ids"]
            schedule.update({pos + i: t for i, t in enumerate(ids)})
            pos += len(ids)
            observations.append((pos, pos + obs_len))
            pos += obs_len
        pos += args.think
        final = tokenizer(" <answer> \\boxed{1} </answer>", add_special_tokens=False)["input_ids"] + [eos]
        schedule.update({pos + i: t for i, t in enumerate(final)})

        dtype = torch.float32 if args.smoke else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, attn_implementation="sdpa")
        model = model.to(device).eval()
        if not args.smoke:  # the repetition penalty under CUDA graphs must match the eager engine, token for token
            from llamafactory_agentic.rollout import GenerationRequest, SamplingSettings

            greedy = SamplingSettings(temperature=0.0, stop_strings=(), repetition_penalty=1.1)
            prompt = template.encode_oneturn(tokenizer, [{"role": "user", "content": "Repeat after me: a a a a"},
                                                         {"role": "assistant", "content": ""}])[0]  # fmt: skip
            outs = []
            for graphs in (True, False):
                check = HFEngine(model, tokenizer, max_batch_size=4, max_context=1024, cuda_graphs=graphs)
                reqs = [GenerationRequest(i, prompt, [], 64 + 16 * i) for i in range(4)]
                outs.append([r.token_ids for r in check.generate(reqs, greedy)])
                check.release()
            print(f"repetition penalty 1.1, greedy, CUDA graphs vs eager identical: {outs[0] == outs[1]}", flush=True)
        results = {}
        # warm-up (allocations, CUDA graph capture) on a copy of the first questions, not measured
        warm = tmp / "warm.jsonl"
        warm.write_text("\n".join(data.read_text().splitlines()[: min(8, args.samples)]) + "\n", encoding="utf-8")
        for name in ("warmup", "paper", "reference"):
            cfg = config(name)
            if name == "warmup":
                cfg["eval_benchmarks"][0]["path"] = str(warm)
            setup = parse_eval_config(cfg)
            policy = ScheduledPolicy(model, prompt_len, schedule, observations, base_vocab, args.samples)
            engine = HFEngine(
                policy, tokenizer, max_batch_size=args.samples, max_context=512 + response_budget, seed=0
            )
            if name == "reference":
                engine = NoStopEngine(engine, tokenizer)
            metrics = evaluate(setup, engine=engine, executor=FixedExecutor(observation))
            if name == "warmup":
                continue
            gen = metrics["timing"]["generation"]
            bench = metrics["benchmarks"]["bench"]
            results[name] = gen["time/total"]
            print(
                f"{'tiny (smoke)' if args.smoke else args.model}, {args.samples} samples in flight, {args.per_call} "
                f"tokens per call, protocol {name:<9}: {gen['time/total']:8.2f} s, "
                f"{args.samples / gen['time/total']:7.3f} samples/s, {int(engine.stats['generated_tokens'])} tokens "
                f"generated ({int(gen.get('generated_tokens', 0))} kept), {bench['tool_calls_per_sample']:.2f} tool "
                f"calls/sample, EM {bench['metrics']['em']:.2f}, "
                f"finish {bench['finish_reasons']}",
                flush=True,
            )
        ratio = results["reference"] / results["paper"]
        print(f"reference (no stop strings) / paper (stop strings, budget per call): {ratio:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", action="store_true")
    parser.add_argument("--samples", type=int, default=None, help="CPU default 64, GPU default 128")
    parser.add_argument("--new", type=int, default=32, help="CPU: new tokens per call")
    parser.add_argument("--threads", type=int, default=1, help="CPU: torch threads")
    parser.add_argument("--model", default="qwen2.5-0.5b", help="GPU: architecture from testing.REAL_SIZE_CONFIGS")
    parser.add_argument("--tool-rounds", type=int, default=3, help="GPU: forced tool calls per sample")
    parser.add_argument("--think", type=int, default=64, help="GPU: freely sampled tokens before each call")
    parser.add_argument("--per-call", type=int, default=4096, help="GPU: new tokens per generation call (paper 4096)")
    parser.add_argument("--smoke", action="store_true", help="GPU mode on CPU with the tiny model (checks the script)")
    args = parser.parse_args()
    if args.gpu or args.smoke:
        args.samples = args.samples or (4 if args.smoke else 128)
        run_gpu(args)
    else:
        args.samples = args.samples or 64
        run_cpu(args)


if __name__ == "__main__":
    main()
