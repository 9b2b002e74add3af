# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""`rollout/consecutive_branches` and `rollout/longest_branch_chain` from the branch trees of a rollout."""

from types import SimpleNamespace

from llamafactory_agentic.train.arpo.metrics import consecutive_branch_stats


def rec(group, member, parent=None, call=None):
    # the four fields of a ScoredTrajectory that the statistic reads
    return SimpleNamespace(group=group, member=member, parent=parent, branch_call_index=call)


def test_chains_of_branching_at_successive_tool_calls():
    records = [
        # group 0: 0 -> 1 (after call 1) -> 2 (after call 2) -> 3 (after call 3); 0 -> 4 (after call 3)
        rec(0, 0),
        rec(0, 1, parent=0, call=1),
        rec(0, 2, parent=1, call=2),
        rec(0, 3, parent=2, call=3),
        rec(0, 4, parent=0, call=3),
        # group 1: a branch of a branch made two calls later is not consecutive
        rec(1, 0),
        rec(1, 1, parent=0, call=1),
        rec(1, 2, parent=1, call=3),
        # group 2: no branches (GRPO)
        rec(2, 0),
        rec(2, 1),
    ]
    consecutive, longest = consecutive_branch_stats(records)
    assert consecutive == 2  # 1 -> 2 and 2 -> 3
    assert longest == {0: 3, 1: 1, 2: 0}
    shuffled = list(reversed(records))
    assert consecutive_branch_stats(shuffled) == (consecutive, longest)
