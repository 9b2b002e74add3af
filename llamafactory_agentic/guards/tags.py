# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

r"""Silent tool mismatches, said out loud (issue 35): tags no configured tool answers, runs without a tool call.

* `unanswered_tags(texts, tool_tags)`: the tags a system prompt teaches (`<convert> ... </convert>`) that no tool of
  the run answers. A run of ARPO or of the evaluation without `agentic_tool_config` loads python and search: the model
  writes `<convert> 3 km to m </convert>`, the rollout never stops there, no call is made, and nothing said so.
  `warn_unanswered_tags` logs one warning naming the tags, the run's tools and the fix; training checks the system
  prompts of its data (`train/arpo/workflow.py`), the evaluation those it sends (`evaluation/runner.py`).
* `no_tool_call_warning(kind, calls, trajectories)`: the warning for a whole validation or evaluation in which no
  trajectory called a tool (logged by the trainer's validation and by the evaluation).

The tags of the trajectory format itself (`<think>`, `<answer>`, `<result>`, docs/algorithms.md §2) are never tool
tags.
"""

import re
from collections.abc import Iterable

from ..common.log import get_logger


logger = get_logger(__name__)

FORMAT_TAGS = frozenset({"think", "answer", "result"})
_OPEN = re.compile(r"<([A-Za-z_][A-Za-z0-9_\-]*)>")


def unanswered_tags(texts: Iterable[str | None], tool_tags: Iterable[str]) -> list[str]:
    r"""Tags opened and closed (`<x>` and `</x>`) in any of `texts` that are neither format tags nor tool tags.

    Args:
        texts: System prompts (None and empty ones are skipped).
        tool_tags: The tags of the run's tools (`ToolExecutor.tools` is keyed by tag).

    Returns:
        The unanswered tags, sorted, without brackets (e.g. `["convert"]`).
    """
    answered = set(tool_tags) | FORMAT_TAGS
    found: set[str] = set()
    for text in dict.fromkeys(t for t in texts if t):
        found.update(tag for tag in _OPEN.findall(text) if tag not in answered and f"</{tag}>" in text)
    return sorted(found)


def warn_unanswered_tags(texts: Iterable[str | None], executor: object, where: str) -> list[str]:
    r"""Log a warning when `texts` teach tags that no tool of `executor` answers; returns those tags.

    Args:
        texts: The system prompts the run sends the model.
        executor: The run's `ToolExecutor` (its `tools` is keyed by tag); an executor without a tag listing, or a
            native tool-call format, is not checked (returns []).
        where: What the texts are, for the message (e.g. `the system prompts of dataset units_rl`).
    """
    tools = getattr(executor, "tools", None)
    if not isinstance(tools, dict) or not tools:
        return []
    tags = unanswered_tags(texts, tools)
    if tags:
        named = ", ".join(f"<{t}> ... </{t}>" for t in tags)
        have = ", ".join(f"<{t}>" for t in sorted(tools))
        logger.warning(
            f"[agentic-tools] {where} name {named}, which no configured tool answers (this run's tools: {have}): "
            "a call the model writes there is never run and gets no result. Set agentic_tool_config to a tool config "
            "that lists the tool (a `module:Class` tool needs its folder on PYTHONPATH; docs/tutorial.md §3)."
        )
    return tags


def no_tool_call_warning(kind: str, calls: int, trajectories: int) -> str | None:
    r"""The message for a whole `kind` (validation, evaluation) of `trajectories` with `calls` tool calls, or None.

    None when a call was made or nothing ran. The message names the likely causes: a policy never cold-started on the
    tags, or a tool config that does not answer the tags the prompts teach.
    """
    if calls > 0 or trajectories <= 0:
        return None
    return (
        f"this {kind} made 0 tool calls in {trajectories} trajectories: the model never wrote a call that a configured "
        "tool answers. Likely causes: the policy was never cold-started on the tool tags (run agentic SFT first), or "
        "agentic_tool_config does not list the tool the system prompt teaches (docs/tutorial.md)"
    )


def warn_no_tool_calls(kind: str, records: list, step: int) -> None:
    r"""Log `no_tool_call_warning` for `records` (trajectory records with `num_tool_calls`) at `step`, if it applies."""
    warning = no_tool_call_warning(kind, sum(r.num_tool_calls for r in records), len(records))
    if warning:
        from ..common.log import get_logger

        get_logger(__name__).warning(f"[agentic] step {step}: {warning}")
