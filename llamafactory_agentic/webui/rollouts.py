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

r"""The rollout viewer: the groups of one rollout from `rollouts.jsonl` as branch trees in HTML.

A record of `rollouts.jsonl` (written by `StepLogger.write_rollout_log`, train/arpo/pipeline.py) is one group: the prompt, the ground truth
and its M trajectories with `member`, `parent`, `branch_pos`, `branch_call_index`, the decoded `response`, rewards,
`tool_calls` and the lineage's `round_entropies` / `entropy_base`. A branch shares its source's response up to
`branch_pos`, which is the end of the observation of the source's call number `branch_call_index` (the branch
decision is taken after a round that ended in a tool call and got its `<result>`), so a branch's own text starts
after that many `</result>` in its response. The decision after round `r` (ending in call `r + 1`) used
dH = `round_entropies[r] - entropy_base` (docs/algorithms.md §3.2); the viewer prints it at every call, with the branches
created there.
"""

import html
import json
import os
import re
import threading
from typing import Any


RESULT_CLOSE = "</result>"
TAGS = ("think", "search", "python", "result", "answer")
ROUND_END_TAGS = ("search", "python", "result")  # their closing tag ends a round (stop string) or an observation
MAX_GROUPS = 32  # groups drawn per rollout
MAX_SEGMENT_CHARS = 6000  # characters of one trajectory segment (the middle is elided beyond)

_TAG = re.compile(r"&lt;(/?)(" + "|".join(TAGS) + r")&gt;|(&lt;\|[a-z_]+\|&gt;)")
_USER = re.compile(r"user\n(.*?)(?:<\|im_end\|>|<\|eot_id\|>|$)", re.DOTALL)
_HEAD = re.compile(r'^\{"global_step": (-?\d+), "rollout": (-?\d+)')

STYLE = """
<style>
.ag-viewer { font-size: 13px; }
.ag-group { border: 1px solid var(--border-color-primary, #ddd); border-radius: 6px; padding: 6px 10px; margin: 8px 0; }
.ag-node { border-left: 3px solid #9ab; padding-left: 10px; margin: 6px 0 6px 8px; }
.ag-node.ag-branch { border-left-color: #e69138; }
.ag-node.ag-fill { border-left-color: #8e7cc3; }
.ag-head { font-weight: 600; }
.ag-badge { display: inline-block; border-radius: 4px; padding: 0 5px; margin: 0 2px; font-size: 11px;
  background: rgba(127,127,127,.15); font-weight: normal; }
.ag-good { background: rgba(46,160,67,.25); } .ag-bad { background: rgba(218,54,51,.2); }
.ag-text { white-space: pre-wrap; word-break: break-word; font-family: var(--font-mono, monospace); font-size: 12px;
  margin: 4px 0; }
.ag-think { color: #888 !important; font-style: italic; }
.ag-search, .ag-python { color: #1f6feb !important; font-weight: 600; }
.ag-result { background: rgba(46,160,67,.13); }
.ag-answer { color: #d46b08 !important; font-weight: 600; }
.ag-special { color: #aaa !important; }
.ag-call { display: block; margin: 2px 0; font-size: 11px; font-family: var(--font, sans-serif); color: #666; }
.ag-call b { color: #e69138; }
.ag-prompt { white-space: pre-wrap; font-size: 12px; color: #666; }
</style>
"""


# ---------------------------------------------------------------------------------------------- reading
class RolloutIndex:
    r"""Byte offsets of the records of `rollouts.jsonl` by rollout number, extended as the file grows."""

    def __init__(self, path: str):
        r"""Index `path` (nothing is read before `refresh`)."""
        self.path = path
        self.scanned = 0
        self.offsets: dict[int, list[int]] = {}
        self.steps: dict[int, int] = {}
        self._lock = threading.Lock()

    def refresh(self) -> "RolloutIndex":
        r"""Scan the bytes appended since the last call (a half-written last line is left for the next call)."""
        with self._lock:
            try:
                size = os.path.getsize(self.path)
            except OSError:
                self.scanned, self.offsets, self.steps = 0, {}, {}
                return self
            if size < self.scanned:  # the file was replaced (a new run in the same folder)
                self.scanned, self.offsets, self.steps = 0, {}, {}
            with open(self.path, "rb") as f:
                f.seek(self.scanned)
                offset = self.scanned
                for line in f:
                    if not line.endswith(b"\n"):
                        break
                    head = _HEAD.match(line[:80].decode("utf-8", "replace"))
                    if head is None:  # another key order: parse the whole line
                        try:
                            record = json.loads(line)
                            step, rollout = int(record["global_step"]), int(record["rollout"])
                        except (ValueError, KeyError, TypeError):
                            offset += len(line)
                            continue
                    else:
                        step, rollout = int(head.group(1)), int(head.group(2))
                    self.offsets.setdefault(rollout, []).append(offset)
                    self.steps[rollout] = step
                    offset += len(line)
                self.scanned = offset
        return self

    def choices(self) -> list[tuple[str, str]]:
        r"""`(label, value)` per rollout, newest first: "step 7 · 2 groups".

        A rollout is named by the step it fed first, as in the rollout progress line (one rollout per step at most).
        """
        return [
            (f"step {self.steps[rollout] + 1} · {plural(len(self.offsets[rollout]), 'group')}", str(rollout))
            for rollout in sorted(self.offsets, reverse=True)
        ]

    def groups(self, rollout: int) -> list[dict[str, Any]]:
        r"""The group records of one rollout, in file order."""
        records = []
        with open(self.path, "rb") as f:
            for offset in self.offsets.get(rollout, []):
                f.seek(offset)
                records.append(json.loads(f.readline()))
        return records


_INDEXES: dict[str, RolloutIndex] = {}
_INDEX_LOCK = threading.Lock()


def plural(count: int, noun: str) -> str:
    r"""`"1 branch"`, `"2 branches"`, `"0 trajectories"`: the count with the noun in the right number (English)."""
    if count == 1:
        return f"{count} {noun}"
    if noun.endswith(("ch", "sh", "s", "x")):
        return f"{count} {noun}es"
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return f"{count} {noun[:-1]}ies"
    return f"{count} {noun}s"


def rollout_index(path: str) -> RolloutIndex:
    r"""The shared, refreshed index of `path`."""
    with _INDEX_LOCK:
        index = _INDEXES.setdefault(os.path.abspath(path), RolloutIndex(path))
    return index.refresh()


# ---------------------------------------------------------------------------------------------- rendering
def _result_ends(text: str) -> list[int]:
    ends, start = [], 0
    while (pos := text.find(RESULT_CLOSE, start)) != -1:
        start = pos + len(RESULT_CLOSE)
        ends.append(start)
    return ends


def branch_cut(member: dict[str, Any], parent: dict[str, Any] | None) -> int:
    r"""Character offset in `member["response"]` where its own text starts (0 for a global rollout).

    The end of its `branch_call_index`-th `</result>`; when that is not found, the common prefix with its source.
    """
    if parent is None or member.get("parent") is None:
        return 0
    text, calls = member.get("response", ""), member.get("branch_call_index")
    ends = _result_ends(text)
    if calls and len(ends) >= calls:
        return ends[calls - 1]
    other = parent.get("response", "")
    cut = 0
    while cut < min(len(text), len(other)) and text[cut] == other[cut]:
        cut += 1
    return cut


def delta_h(member: dict[str, Any], call: int) -> float | None:
    r"""The entropy change dH of the branch decision after the round that ended in call number `call` (1-based); None if unknown."""
    entropies, base = member.get("round_entropies") or [], member.get("entropy_base")
    if base is None or call < 1 or len(entropies) < call:
        return None
    return float(entropies[call - 1]) - float(base)


def colour_tags(text: str, stack: list[str] | None = None) -> tuple[str, list[str]]:
    r"""HTML of `text` with `<think>`, `<search>`, `<python>`, `<result>`, `<answer>` spans coloured.

    Args:
        text: Raw text (escaped here).
        stack: Tags still open from the previous piece of the same trajectory (reopened first).

    Returns:
        `(html, tags still open at the end)`; every span opened here is closed at the end of the piece.
    """
    stack = list(stack or [])
    out = [f'<span class="ag-{tag}">' for tag in stack]
    escaped = html.escape(text, quote=False)
    last = 0
    for match in _TAG.finditer(escaped):
        out.append(escaped[last : match.start()])
        last = match.end()
        if match.group(3):
            out.append(f'<span class="ag-special">{match.group(3)}</span>')
        elif match.group(1):  # closing tag; a tool call or an observation ends the round: close everything
            out.append(match.group(0))
            if match.group(2) in stack or match.group(2) in ROUND_END_TAGS:
                while stack:
                    out.append("</span>")
                    if stack.pop() == match.group(2) and match.group(2) not in ROUND_END_TAGS:
                        break
        else:
            stack.append(match.group(2))
            out.append(f'<span class="ag-{match.group(2)}">{match.group(0)}')
    out.append(escaped[last:])
    out.append("</span>" * len(stack))
    return "".join(out), stack


def _elide(text: str) -> str:
    if len(text) <= MAX_SEGMENT_CHARS:
        return text
    half = MAX_SEGMENT_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters ...]\n{text[-half:]}"


def _badge(text: str, cls: str = "") -> str:
    return f'<span class="ag-badge {cls}">{html.escape(str(text))}</span>'


def _call_note(member: dict[str, Any], call: int, children: list[dict[str, Any]]) -> str:
    calls = member.get("tool_calls") or []
    parts = []
    if len(calls) >= call:
        info = calls[call - 1]
        detail = [str(info.get("tool", "?")), str(info.get("status", ""))]
        if info.get("cached"):
            detail.append("cached")
        if isinstance(info.get("latency_s"), (int, float)):
            detail.append(f"{info['latency_s']:.2f}s")
        parts.append(f"call {call}: " + " · ".join(d for d in detail if d))
    dh = delta_h(member, call)
    if dh is not None:
        parts.append(f"ΔH {dh:+.3f}")
    branched = [c for c in children if c.get("branch_call_index") == call]
    if branched:
        parts.append("<b>↳ branch → " + ", ".join(f"#{c['member']}" for c in branched) + "</b>")
    return f'<span class="ag-call">▸ {" · ".join(parts)}</span>' if parts else ""


def _text_pieces(member: dict[str, Any], text: str, cut: int, kids: list[dict[str, Any]]) -> list[str]:
    r"""HTML pieces of a trajectory's own text (from `cut`), cut after each `</result>` to note that call."""
    pieces, stack, start = [], [], cut
    for call, end in enumerate(_result_ends(text), start=1):
        if end <= cut:
            continue
        piece, stack = colour_tags(_elide(text[start:end]), stack)
        pieces.append(piece + _call_note(member, call, kids))
        start = end
    piece, _ = colour_tags(_elide(text[start:]), stack)
    pieces.append(piece)
    return pieces


def _node(member: dict[str, Any], by_member: dict[int, dict], children: dict[int, list], depth: int = 0) -> str:
    parent = by_member.get(member.get("parent")) if member.get("parent") is not None else None
    text = member.get("response", "")
    cut = branch_cut(member, parent)
    kids = children.get(member["member"], [])
    if parent is not None:
        kind, cls = f"branch of #{parent['member']} after call {member.get('branch_call_index')}", "ag-branch"
    elif member.get("is_fill"):
        kind, cls = "global rollout (budget fill)", "ag-fill"
    else:
        kind, cls = "global rollout", ""
    reward = member.get("reward")
    badges = [
        _badge(
            f"reward {reward:.3g}" if isinstance(reward, (int, float)) else "reward ?",
            "ag-good" if member.get("accuracy") else "ag-bad",
        ),  # fmt: skip
        _badge(f"accuracy {member.get('accuracy', 0):.0f}"),
        _badge(f"advantage {member.get('advantage', 0):+.3f}"),
        _badge(plural(int(member.get("num_tool_calls", 0)), "call")),
        _badge(f"finish {member.get('finish_reason', '?')}"),
    ]
    if member.get("truncated"):
        badges.append(_badge("truncated", "ag-bad"))
    if member.get("hit_call_limit"):
        badges.append(_badge("call limit", "ag-bad"))

    inherited = len([end for end in _result_ends(text) if end <= cut])
    pieces = _text_pieces(member, text, cut, kids)
    if parent is not None and inherited:
        pieces.insert(0, f'<span class="ag-call">… {plural(inherited, "call")} shared with #{parent["member"]}</span>')

    sub = "".join(_node(child, by_member, children, depth + 1) for child in kids)
    return (
        f'<div class="ag-node {cls}"><div class="ag-head">#{member["member"]} · {html.escape(kind)} '
        f'{"".join(badges)}</div><div class="ag-text">{"".join(pieces)}</div>{sub}</div>'
    )


def _question(prompt: str) -> str:
    matches = _USER.findall(prompt or "")
    text = matches[-1] if matches else (prompt or "")[-400:]
    return text.strip()


def render_group(record: dict[str, Any]) -> str:
    r"""HTML of one group record: the question, the ground truth and the trajectories as a branch tree."""
    members = sorted(record.get("trajectories", []), key=lambda m: m["member"])
    by_member = {m["member"]: m for m in members}
    children: dict[int, list] = {}
    for m in members:
        if m.get("parent") is not None:
            children.setdefault(m["parent"], []).append(m)
    roots = [m for m in members if m.get("parent") is None or m["parent"] not in by_member]
    rewards = [m.get("reward") for m in members if isinstance(m.get("reward"), (int, float))]
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    branches = sum(1 for m in members if m.get("parent") is not None)
    head = (
        f'<div class="ag-head">Group {record.get("group")} · {plural(len(members), "trajectory")} · '
        f"{plural(branches, 'branch')} · "
        f"mean reward {mean:.3g} · ground truth {_badge(record.get('ground_truth'))} "
        f"{_badge(record.get('data_source') or '')}</div>"
        f"<div>{html.escape(_question(record.get('prompt', '')))}</div>"
        f'<details><summary>prompt</summary><div class="ag-prompt">{html.escape(record.get("prompt", ""))}</div>'
        "</details>"
    )
    tree = "".join(_node(root, by_member, children) for root in roots)
    return f'<div class="ag-group">{head}{tree}</div>'


def render_rollout(records: list[dict[str, Any]]) -> str:
    r"""HTML of every group of one rollout (at most `MAX_GROUPS`), with the viewer's style."""
    if not records:
        return ""
    first = records[0]
    title = (
        f"<p><b>Rollout of step {int(first.get('global_step', 0)) + 1}</b> · "
        f"{plural(len(records), 'logged group')} · <span class='ag-think'>&lt;think&gt;</span> "
        "<span class='ag-search'>&lt;search&gt; &lt;python&gt;</span> "
        "<span class='ag-result'>&lt;result&gt; (observation, not trained)</span> "
        "<span class='ag-answer'>&lt;answer&gt;</span></p>"
    )
    shown = records[:MAX_GROUPS]
    more = (
        f"<p>... {plural(len(records) - len(shown), 'more group')} not shown.</p>" if len(records) > len(shown) else ""
    )
    body = "".join(render_group(record) for record in shown)
    return f'{STYLE}<div class="ag-viewer">{title}{body}{more}</div>'


def render_chat_turn(member: dict[str, Any], title: str = "Last answer with tools") -> str:
    r"""HTML of one Chat answer generated with tools, drawn as the viewer draws a trajectory.

    Args:
        member: A trajectory record (`webui.chat.chat_record`): `response`, `tool_calls`, `num_tool_calls`,
            `finish_reason`, `truncated`, `hit_call_limit`.
        title: The head line.

    Returns:
        The answer with its tags coloured, each call noted after its `<result>` (tool, status, cached, latency),
        and badges for the call count and the finish reason, with the viewer's style.
    """
    badges = [
        _badge(plural(int(member.get("num_tool_calls", 0)), "call")),
        _badge(f"finish {member.get('finish_reason') or '?'}"),
    ]
    if member.get("truncated"):
        badges.append(_badge("truncated", "ag-bad"))
    if member.get("hit_call_limit"):
        badges.append(_badge("call limit", "ag-bad"))
    pieces = _text_pieces(member, member.get("response", ""), 0, [])
    return (
        f'{STYLE}<div class="ag-viewer"><div class="ag-node"><div class="ag-head">{html.escape(title)} '
        f'{"".join(badges)}</div><div class="ag-text">{"".join(pieces)}</div></div></div>'
    )
