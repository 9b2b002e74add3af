# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""With the default settings (`rl_max_staleness: 0`, issue 36) a real ARPO run is unchanged by the rollout seam.

`async_parity.run_parity` runs `llamafactory-cli train recipes/tiny/arpo_cpu.yaml` for 3 steps on CPU (tools,
branching, dynamic sampling, recomputed old log-probs, a weight sync between rollouts, validation). The expected
values (`async_parity_expected.json`: the log history without time, memory, latency and the tool cache's write
counters, and a SHA-256 of the final weights) were recorded with `PYTHONPATH=/work/main python
tests/train/async_parity.py OUT` on the code before the seam (commit 0845f67), twice, with identical results.
"""

import json
from pathlib import Path

import pytest

from .async_parity import run_parity


pytestmark = pytest.mark.slow
EXPECTED = json.loads((Path(__file__).with_name("async_parity_expected.json")).read_text())


def test_default_settings_leave_log_history_and_final_weights_unchanged(tmp_path):
    """The comparison fails on any differing logged value (or a key added or lost) or on a differing weight hash."""
    result = run_parity(tmp_path)
    assert len(result["log"]) == len(EXPECTED["log"])
    for got, want in zip(result["log"], EXPECTED["log"]):
        assert got == want, {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert result["weights_sha256"] == EXPECTED["weights_sha256"]
