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

"""Shared pieces of the evaluation tests: small benchmark files, a scripted policy for the fake server, configs."""

import json
import re
from pathlib import Path


ASSISTANT = "<|im_start|>assistant\n"

# question -> replies by round (round = `</think>` tags the model wrote so far, one per reply); replies run past their
# stop string on purpose
SCRIPTS = {
    "What is 17 + 25?": [
        "<think> add </think> <python> print(17 + 25) </python> <result> 99 </result> never seen",
        "<think> the tool says 42 </think> <answer> The final answer is \\[ \\boxed{42} \\] </answer> trailing",
    ],
    "What is 2 to the power 10?": [
        "<think> I know this </think> <answer> \\[ \\boxed{1000} \\] </answer>",  # wrong
    ],
    "Simplify 18/24.": [
        "<think> reduce </think> <answer> \\boxed{\\frac{3}{4}} </answer>",
    ],
    "What is the capital city of Canada?": [
        "<think> look it up </think> <search> capital of Canada </search> junk",
        "<think> again </think> <search> capital of  Canada </search>",  # repeated query -> notice
        "<think> done </think> <answer> \\boxed{\\text{Ottawa, Ontario}} </answer>",  # judge: correct, EM: no
    ],
    "Which river flows through Cairo?": [
        "<think> I will write the result myself </think> <result> Nile </result>",  # dropped, model continues
        "<answer> \\boxed{Nile} </answer>",
    ],
    "In which country is Porto?": [
        "<think> hmm </think> <answer> \\boxed{Spain} </answer>",  # wrong
    ],
}

MATH_ROWS = [
    {"problem": "What is 17 + 25?", "answer": 42},
    {"problem": "What is 2 to the power 10?", "answer": 1024},
    {"problem": "Simplify 18/24.", "answer": "\\frac{3}{4}"},
]
QA_ROWS = [
    {"question": "What is the capital city of Canada?", "answer": ["Ottawa"]},
    {"question": "Which river flows through Cairo?", "answer": '["Nile", "the Nile River"]'},
    {"question": "In which country is Porto?", "answer": ["Portugal"]},
]


def sum_policy(context, body):
    """`What is X + Y?`: compute with python, then answer (wrong when X is odd)."""
    x, y = map(int, re.search(r"What is (\d+) \+ (\d+)\?", context.rsplit("<|im_start|>user\n", 1)[-1]).groups())
    assistant = context.rsplit("<|im_start|>assistant\n", 1)[-1]
    if "</python>" not in assistant:
        return f"<think> compute </think> <python> print({x} + {y}) </python> extra"
    answer = x + y if x % 2 == 0 else x + y + 1
    return f"<think> ok </think> <answer> \\boxed{{{answer}}} </answer>"


def write_jsonl(path, rows):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def question_of(context: str) -> str:
    user = context.rsplit("<|im_start|>user\n", 1)[-1]
    return user.split("<|im_end|>", 1)[0].strip()


def scripted_policy(scripts=SCRIPTS, default="<think> ? </think> <answer> \\boxed{0} </answer>"):
    """`policy(context, body)` for FakeOpenAIServer: the reply for the question's current round."""

    def policy(context, body):
        replies = scripts.get(question_of(context))
        if replies is None:
            return default
        rounds = context.rsplit(ASSISTANT, 1)[-1].count("</think>")
        return replies[min(rounds, len(replies) - 1)]

    return policy


def judge_by_prediction(replies):
    """`judge(prompt)` answering by the predicted answer in the prompt (`replies[prediction]`)."""

    def judge(prompt):
        prediction = prompt.rsplit("Predicted Answer:", 1)[-1].strip()
        return replies.get(prediction, "Incorrect")

    return judge


def base_config(tmp_path, model_dir, url=None, **extra):
    data = tmp_path / "data"
    write_jsonl(data / "mymath.jsonl", MATH_ROWS)
    write_jsonl(data / "myqa.jsonl", QA_ROWS)
    config = {
        "model_name_or_path": str(model_dir),
        "template": "qwen",
        "agentic_search_backend": "replay",
        "agentic_cache_path": str(tmp_path / "tool_cache.sqlite"),
        "agentic_python_timeout": 20,
        "agentic_tool_workers": 4,
        "eval_preset": "paper",
        "eval_benchmarks": [
            {"name": "mymath", "path": str(data / "mymath.jsonl"), "task": "math", "metric": "judge"},
            {"name": "myqa", "path": str(data / "myqa.jsonl"), "task": "qa", "metric": "f1"},
        ],
        "eval_runs": 2,
        "eval_batch_size": 4,
        "eval_progress": False,
        "eval_output_dir": str(tmp_path / "out"),
    }
    if url is not None:
        config.update(eval_base_url=url, eval_request_timeout=30)
    config.update(extra)
    return config
