# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

r"""`llamafactory-agentic task init DIR`: a task of your own to edit, the starting point of docs/tutorial.md.

It writes a small unit-conversion task in the layouts a task of one's own needs:

    DIR/units_tool.py        a `BaseTool` subclass (`units_tool:ConvertTool`, tag `<convert>`)
    DIR/units_reward.py      a reward function (`units_reward:score`: format gate, boxed number, -1 / 0 / 1 (+0.1))
    DIR/tools.yaml           the tool config naming the tool (agentic_tool_config)
    DIR/agentic_sft.yaml     the recipe of the cold start (agentic SFT)
    DIR/arpo.yaml            the recipe of ARPO
    DIR/eval.yaml            the evaluation of the trained model on the held-out rows
    DIR/data/                dataset_info.json, sft.jsonl (arpo_sft), train.jsonl and heldout.jsonl (arpo_rl)

The files come from the package (`resources/task_skeleton/`), the recipes with the folder's absolute path in place of
`TASK_DIR` (they run from any folder); the rows are generated here, the observations in the
cold-start trajectories by the written tool itself, so the data and the tool agree. Held-out questions never occur in
training rows.
"""

import importlib.util
import json
import os
import random
import shutil
from importlib import resources
from pathlib import Path
from typing import Any


SKELETON = ("resources", "task_skeleton")
FILES = ("units_tool.py", "units_reward.py", "tools.yaml", "agentic_sft.yaml", "arpo.yaml", "eval.yaml")
PLACEHOLDER = "TASK_DIR"  # in the recipes: the task folder's absolute path, so they run from any folder
SYSTEM_PROMPT = (
    "You convert units. Think in <think> </think>. To convert, write <convert> VALUE UNIT to UNIT </convert> "
    "(units: mm cm m km in ft mi g kg lb s min h); the result appears in <result> </result>. Put the final answer in "
    "<answer> </answer> as \\boxed{NUMBER}."
)
SIZES = {"sft": 240, "train": 64, "heldout": 16}
# (source unit, target unit, how the question names the target)
PAIRS = [
    ("km", "m", "metres"), ("m", "cm", "centimetres"), ("cm", "mm", "millimetres"), ("mi", "km", "kilometres"),
    ("ft", "m", "metres"), ("in", "cm", "centimetres"), ("kg", "g", "grams"), ("lb", "kg", "kilograms"),
    ("g", "kg", "kilograms"), ("h", "min", "minutes"), ("min", "s", "seconds"), ("h", "s", "seconds"),
]  # fmt: skip


def dataset_info() -> dict[str, dict[str, Any]]:
    r"""`data/dataset_info.json` of the skeleton: `units_sft` (arpo_sft), `units_rl` and `units_heldout` (arpo_rl)."""
    return {
        "units_sft": {
            "file_name": "sft.jsonl",
            "formatting": "arpo_sft",
            "columns": {"messages": "conversations", "system": "system"},
        },
        "units_rl": {"file_name": "train.jsonl", "formatting": "arpo_rl"},
        "units_heldout": {"file_name": "heldout.jsonl", "formatting": "arpo_rl"},
    }


def _load_tool_module(path: Path):
    spec = importlib.util.spec_from_file_location("units_tool", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _questions(rng: random.Random, n: int, seen: set[str]) -> list[tuple[str, str, str]]:
    """`n` distinct `(question, call body, source)` triples, none in `seen` (which they are added to)."""
    out = []
    while len(out) < n:
        source, target, target_name = rng.choice(PAIRS)
        value = rng.choice([rng.randint(1, 99), rng.randint(1, 99) + rng.choice([0.25, 0.5, 0.75])])
        question = f"How many {target_name} are in {value:g} {source}?"
        if question in seen:
            continue
        seen.add(question)
        out.append((question, f"{value:g} {source} to {target}", source))
    return out


def write_task_skeleton(output_dir: str | os.PathLike, seed: int = 0, force: bool = False) -> dict[str, Any]:
    r"""Write the unit-conversion skeleton into `output_dir` (see the module docstring).

    Args:
        output_dir: The task folder; created, or an empty existing one.
        seed: Seed of the questions.
        force: Overwrite the skeleton's files in a folder that is not empty.

    Returns:
        `{"dir", "files", "rows": {"sft", "train", "heldout"}}`.

    Raises:
        FileExistsError: `output_dir` holds files and `force` is not set.
        FileNotFoundError: the installed package lacks the skeleton's files.
    """
    out = Path(output_dir)
    if out.exists() and any(out.iterdir()) and not force:
        raise FileExistsError(f"{out} is not empty; choose a new folder or pass --force to overwrite the skeleton")
    (out / "data").mkdir(parents=True, exist_ok=True)
    source = resources.files("llamafactory_agentic").joinpath(*SKELETON)
    for name in FILES:
        node = source.joinpath(name)
        if not node.is_file():
            raise FileNotFoundError(f"{name} of the task skeleton is not shipped with this installation")
        if name.endswith(".yaml"):  # inside double quotes: the path JSON-escaped
            text = node.read_text(encoding="utf-8").replace(PLACEHOLDER, json.dumps(str(out.resolve()))[1:-1])
            (out / name).write_text(text, encoding="utf-8")
            continue
        with node.open("rb") as src, open(out / name, "wb") as dst:
            shutil.copyfileobj(src, dst)

    tool = _load_tool_module(out / "units_tool.py").ConvertTool()
    rng = random.Random(seed)
    seen: set[str] = set()
    heldout = _questions(rng, SIZES["heldout"], seen)
    train = _questions(rng, SIZES["train"], seen)
    sft = _questions(rng, SIZES["sft"], seen)

    def truth(body: str) -> str:
        return tool.run(body).text.split()[0]

    def rl_row(index: int, item: tuple[str, str, str], split: str) -> dict[str, Any]:
        question, body, _ = item
        return {
            "data_source": "units",
            "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}],
            "ability": "math",
            "reward_model": {"ground_truth": truth(body), "style": "rule"},
            "extra_info": {"index": index, "split": split},
        }

    def sft_row(item: tuple[str, str, str]) -> dict[str, Any]:
        question, body, source = item
        observation = tool.run(body).text
        trajectory = (
            f"<think> The question gives {source}; I convert with the tool. </think> <convert> {body} </convert> "
            f"<result>\n{observation}\n</result> <think> The tool says {observation}. </think> "
            f"<answer> The final answer is \\[ \\boxed{{{observation.split()[0]}}} \\] </answer>"
        )
        return {
            "system": SYSTEM_PROMPT,
            "conversations": [{"from": "human", "value": question}, {"from": "gpt", "value": trajectory}],
        }

    files = {
        "sft.jsonl": [sft_row(item) for item in sft],
        "train.jsonl": [rl_row(i, item, "train") for i, item in enumerate(train)],
        "heldout.jsonl": [rl_row(i, item, "heldout") for i, item in enumerate(heldout)],
    }
    for name, rows in files.items():
        with open(out / "data" / name, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    with open(out / "data" / "dataset_info.json", "w", encoding="utf-8") as f:
        json.dump(dataset_info(), f, indent=2)
    return {
        "dir": str(out),
        "files": [*FILES, *(f"data/{n}" for n in (*files, "dataset_info.json"))],
        "rows": {"sft": len(sft), "train": len(train), "heldout": len(heldout)},
    }
