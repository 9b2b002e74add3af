# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Hand-built rollouts for the trainer's unit tests.

`ScriptedRollout` stands in for `AgenticRollout` only in the unit tests of the trainer's loss and advantage plumbing:
it returns fixed trajectories (real token ids of the tiny tokenizer, real observation spans, a real branch) so that the
test controls the rewards and the loss mask exactly. The end-to-end tests use the real rollout, tools and cache.
"""

import copy
from types import SimpleNamespace

from llamafactory_agentic.hparams import AgenticArguments
from llamafactory_agentic.rollout.trajectory import RolloutOutput, ToolCallRecord, Trajectory
from llamafactory_agentic.train.arpo.records import ScoredTrajectory


THINK = "<think> Let me think about the question. </think>\n<python> print(1 + 2) </python>"
OBSERVATION = " <result>\n3\n</result>"
GOOD = " <think> Let me think. </think> <answer> The final answer is \\[ \\boxed{3} \\] </answer>"
WRONG = " <answer> The final answer is \\[ \\boxed{42} \\] </answer>"
NO_FORMAT = "The answer is 42"


def prompt_ids(tokenizer, question: str) -> list[int]:
    text = (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    )
    return tokenizer.encode(text, add_special_tokens=False)


def make_rows(tokenizer, num_prompts: int) -> list[dict]:
    questions = ["What is 1 + 2?", "Compute 1 + 2 please.", "Add one and two.", "What is the sum of 1 and 2?"]
    return [
        {
            "prompt_ids": prompt_ids(tokenizer, questions[i % len(questions)] + " " * (i // len(questions))),
            "_ground_truth": "3",
            "_data_source": "unit",
            "_ability": "math",
            "_extra": "{}",
        }
        for i in range(num_prompts)
    ]


class ScriptedRollout:
    r"""Deterministic group of M = 4: a correct global rollout with a tool call, a branch of it after the observation
    that answers wrongly, a wrong global rollout, and one without format (reward -1)."""

    def __init__(self, tokenizer, group_size: int = 4):
        assert group_size == 4
        self.tok = tokenizer
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.config = SimpleNamespace(backend="hf")
        self.engine = SimpleNamespace(set_model=lambda model: setattr(self, "model_seen", model))
        self.calls = []

    def _enc(self, text):
        return self.tok.encode(text, add_special_tokens=False)

    def _traj(self, prompt, index, pieces, parent=None, branch_pos=None, calls=0):
        ids, mask = [], []
        for text, trained in pieces:
            enc = self._enc(text)
            ids += enc
            mask += [1 if trained else 0] * len(enc)
        ids.append(self.eos)
        mask.append(1)
        call = ToolCallRecord(
            "python", "print(1 + 2)", len(self._enc(THINK)), "ok", 0.0, False, len(self._enc(OBSERVATION))
        )
        tool_calls = [call] if calls else []
        return Trajectory(
            uid=f"t{index}",
            group_index=0,
            prompt_ids=list(prompt),
            response_ids=ids,
            loss_mask=mask,
            parent=parent,
            branch_pos=branch_pos,
            num_tool_calls=calls,
            tool_calls=tool_calls,
            finish_reason="eos",
            index=index,
        )

    def rollout(self, prompts, training=True):
        self.calls.append((len(prompts), training))
        groups = []
        for p in prompts:
            prefix = len(self._enc(THINK)) + len(self._enc(OBSERVATION))
            good = self._traj(p, 0, [(THINK, True), (OBSERVATION, False), (GOOD, True)], calls=1)
            branch = self._traj(p, 1, [(THINK, True), (OBSERVATION, False), (WRONG, True)], 0, prefix, calls=1)
            wrong = self._traj(p, 2, [("<think> Let me think. </think>", True), (WRONG, True)])
            bad = self._traj(p, 3, [(NO_FORMAT, True)])
            group = [good, branch, wrong, bad] if training else [copy.deepcopy(good)]
            groups.append(group)
        return RolloutOutput(groups=groups, metrics={"rollout/delta_h_mean": 0.25}, timing={"time/generation": 0.01})


# ---------------------------------------------------------------------------------------------- scored records
CALL = ToolCallRecord("python", "print(1)", pos=2, status="ok", latency_s=0.5, cached=False, obs_tokens=2)


def record(group, member, reward, *, parent=None, mask=(1, 1, 0, 0, 1), finish="eos", **overrides):
    values = dict(
        group=group,
        member=member,
        prompt_ids=[1, 2],
        response_ids=list(range(10, 10 + len(mask))),
        loss_mask=list(mask),
        parent=parent,
        branch_pos=2 if parent is not None else None,
        is_fill=False,
        num_tool_calls=1,
        hit_call_limit=False,
        truncated=finish == "length",
        finish_reason=finish,
        tool_calls=[CALL],
        branch_call_index=1 if parent is not None else None,
        reward=reward,
        accuracy=float(reward >= 1.0),
        format_ok=reward > -1.0,
    )
    values.update(overrides)
    return ScoredTrajectory(**values)


def agentic_args(stage: str, **overrides) -> AgenticArguments:
    args = AgenticArguments()
    args.stage = stage
    args.agentic_stage = stage
    for key, value in overrides.items():
        setattr(args, key, value)
    return args


# ---------------------------------------------------------------------------------------------- end-to-end helpers
SEARCH_QUERY = "capital of France"
SEARCH_RESULT = "Page 1: Paris is the capital of France."
SCRIPT = [
    ("<think> Let me think about the question. </think>\n<search> capital of France </search>", True),
    (" <result>\n" + SEARCH_RESULT + "\n</result>", False),
    (" <python> print(1 + 2) </python>", True),
    (" <result>\n3\n</result>", False),
    (" <answer> The final answer is \\[ \\boxed{3} \\] </answer>", True),
]


def render_qwen_prompt(row: dict) -> str:
    r"""Row of an ARPO RL parquet file rendered like LLaMA-Factory's `qwen` template (ending with the assistant header)."""
    messages = row["prompt"]
    system = messages[0]["content"].replace("\x08oxed", "\\boxed")
    user = messages[1]["content"]
    return f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"


def fit_tool_policy(
    model_dir,
    output_dir,
    rows: list[dict],
    steps: int = 150,
    seed: int = 0,
    context: int = 48,
    script=None,
    prompt_suffix: str = "",
    full_every: int = 0,
) -> float:
    r"""A tiny "cold-started" policy: the random tiny model fitted for a few seconds to answer every prompt with SCRIPT
    (a search call, a python call, a boxed answer), so a CPU rollout really calls the tools. Observations are context
    only (not fitted), as in agentic SFT. Only the last `context` prompt tokens are used while fitting (fast on CPU).
    `script`: other `(text, trained)` pieces instead of SCRIPT (an end-of-turn id is written for the text "<EOS>").
    `prompt_suffix`: text after the assistant header of every prompt (qwen3's empty thought when thinking is off).
    `full_every`: every n-th row is fitted on its whole prompt (0: tails only)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    response, labels_mask = [], []
    for text, trained in script or SCRIPT:
        ids = [eos] if text == "<EOS>" else tok.encode(text, add_special_tokens=False)
        response += ids
        labels_mask += [trained] * len(ids)
    response.append(eos)
    labels_mask.append(True)
    examples = []
    for row in rows:
        rendered = tok.encode(render_qwen_prompt(row) + prompt_suffix, add_special_tokens=False)
        # the last `context` tokens, and every `full_every`-th row whole: short prompts end alike (the synthetic rows'
        # questions are a few words after the same system prompt), and a policy fitted on their tails only does not
        # follow SCRIPT after the whole prompt the rollout sees
        full = full_every and len(examples) % full_every == 0
        prompt = rendered if full else rendered[-context:]
        ids = torch.tensor(prompt + response)
        labels = torch.full_like(ids, -100)
        resp_labels = torch.tensor([t if m else -100 for t, m in zip(response, labels_mask)])
        labels[len(prompt) :] = resp_labels
        examples.append((ids, labels))
    optim = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for step in range(steps):
        ids, labels = examples[step % len(examples)]
        loss = model(input_ids=ids[None], labels=labels[None]).loss
        loss.backward()
        optim.step()
        optim.zero_grad()
    model.save_pretrained(str(output_dir))
    tok.save_pretrained(str(output_dir))
    return float(loss.detach())
