# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The rollout viewer: rollouts.jsonl records (the trainer's layout) drawn as branch trees."""

import json
import xml.etree.ElementTree as ET

from llamafactory_agentic.webui.rollouts import (
    branch_cut,
    colour_tags,
    delta_h,
    render_group,
    render_rollout,
    rollout_index,
)


CALL_1 = "<think> look it up </think>\n<search> capital of France </search> <result>\nParis <b>is</b> it\n</result>"
CALL_2 = " <python> print(1 + 2) </python> <result>\n3\n</result>"


def member(index, response, parent=None, calls=None, entropies=(), reward=0.0, **extra):
    return {
        "member": index,
        "parent": parent,
        "branch_pos": None if parent is None else 10 * calls,
        "branch_call_index": calls,
        "is_fill": False,
        "response": response,
        "reward": reward,
        "accuracy": float(reward == 1.0),
        "advantage": 0.0,
        "num_tool_calls": response.count("</result>"),
        "tool_calls": [
            {"tool": "search", "status": "ok", "cached": True, "latency_s": 0.01},
            {"tool": "python", "status": "ok", "latency_s": 0.2},
        ],  # fmt: skip
        "finish_reason": "eos",
        "round_entropies": list(entropies),
        "entropy_base": entropies[0] if entropies else None,
        **extra,
    }


GROUP = {
    "global_step": 4,
    "rollout": 2,
    "group": 0,
    "prompt": "<|im_start|>system\nYou help.<|im_end|>\n<|im_start|>user\nWhat is the capital?<|im_end|>\n"
    "<|im_start|>assistant\n",
    "ground_truth": "Paris",
    "data_source": "unit",
    "trajectories": [
        member(
            0, CALL_1 + CALL_2 + " <answer> \\boxed{Paris} </answer><|im_end|>", entropies=(1.0, 1.2, 0.9), reward=1.0
        ),
        member(1, CALL_1 + " <answer> \\boxed{Rome} </answer><|im_end|>", parent=0, calls=1, entropies=(1.0, 0.7)),
        member(
            2,
            CALL_1 + CALL_2 + " <answer> \\boxed{3} </answer><|im_end|>",
            parent=0,
            calls=2,
            entropies=(1.0, 1.2, 1.1),
        ),  # fmt: skip
        member(3, "<answer> no idea </answer><|im_end|>", entropies=(2.0,), is_fill=True),
    ],
}


def test_branch_point_and_entropy_change():
    source, first, second, fill = GROUP["trajectories"]
    assert branch_cut(first, source) == len(CALL_1)
    assert branch_cut(second, source) == len(CALL_1 + CALL_2)
    assert branch_cut(fill, None) == 0
    assert delta_h(source, 1) == 0.0  # the first decision compares the lineage's first round with itself
    assert abs(delta_h(source, 2) - 0.2) < 1e-9
    assert delta_h(fill, 2) is None  # it has one round only


def test_tags_are_coloured_and_text_is_escaped():
    html, stack = colour_tags("<think> a <b>x</b> </think> <answer> 4")
    assert html.startswith('<span class="ag-think">&lt;think&gt; a &lt;b&gt;x&lt;/b&gt; &lt;/think&gt;</span>')
    assert stack == ["answer"] and html.endswith("</span>")  # closed here, reopened in the next piece
    html, stack = colour_tags(" </answer><|im_end|>", stack)
    assert html.startswith('<span class="ag-answer">') and '<span class="ag-special">&lt;|im_end|&gt;</span>' in html
    assert stack == []
    html, stack = colour_tags("<think> q <search> x </search>")  # a tool call ends the round: nothing stays open
    assert stack == [] and html.count("<span") == html.count("</span>")


def test_group_is_a_tree_with_branch_points():
    root = ET.fromstring(render_group(GROUP))
    nodes = {}
    for div in root.iter("div"):
        if "ag-node" in div.get("class", ""):
            head = "".join(div.find("div").itertext())
            nodes[int(head.split("·")[0].strip().lstrip("#"))] = div
    assert set(nodes) == {0, 1, 2, 3}
    children_of_0 = [d for d in nodes[0].findall("div") if "ag-node" in d.get("class", "")]
    assert [nodes[1], nodes[2]] == children_of_0  # both branches hang under their source
    text_0 = "".join(nodes[0].find("div[@class='ag-text']").itertext())
    assert "call 1: search · ok · cached · 0.01s · ΔH +0.000 · ↳ branch → #1" in text_0
    assert "call 2: python · ok · 0.20s · ΔH +0.200 · ↳ branch → #2" in text_0
    text_1 = "".join(nodes[1].find("div[@class='ag-text']").itertext())
    assert text_1.startswith("… 1 call shared with #0") and "capital of France" not in text_1  # not repeated
    assert "branch of #0 after call 2" in "".join(nodes[2].itertext())
    assert "global rollout (budget fill)" in "".join(nodes[3].itertext())
    head = "".join(root.find("div").itertext())
    assert "4 trajectories · 2 branches" in head and "Paris" in head
    assert "What is the capital?" in "".join(root.itertext())


def test_index_follows_a_growing_file(tmp_path):
    path = tmp_path / "rollouts.jsonl"
    first = dict(GROUP)
    second = dict(GROUP, global_step=6, rollout=3)
    path.write_text(json.dumps(first) + "\n" + json.dumps(dict(first, group=1)) + "\n")
    index = rollout_index(str(path))
    assert index.choices() == [("step 5 · 2 groups", "2")]
    with open(path, "a") as f:
        f.write(json.dumps(second) + "\n" + json.dumps(second)[:40])  # the trainer is writing the next line
    assert rollout_index(str(path)).choices()[0] == ("step 7 · 1 group", "3")  # issue 24 low: "1 groups"
    assert [g["group"] for g in index.groups(2)] == [0, 1]
    html = render_rollout(index.groups(3))
    assert "Rollout of step 7</b> · 1 logged group ·" in html and "ag-viewer" in html


def test_counts_are_plural_only_above_one():
    # issue 24 low: the viewer said "1 branches"
    from llamafactory_agentic.webui.rollouts import plural

    assert [plural(1, "branch"), plural(2, "branch"), plural(0, "trajectory"), plural(1, "call")] == [
        "1 branch",
        "2 branches",
        "0 trajectories",
        "1 call",
    ]
    one_branch = dict(GROUP, trajectories=GROUP["trajectories"][:2])
    head = "".join(ET.fromstring(render_group(one_branch)).find("div").itertext())
    assert "2 trajectories · 1 branch ·" in head, head
