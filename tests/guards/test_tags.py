# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Silent tool mismatches said out loud (issue 35): a tag the prompts teach that no configured tool answers, and a
validation or evaluation without a single tool call; the reward import error that names its fix in one traceback."""

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from llamafactory_agentic.guards.tags import no_tool_call_warning, unanswered_tags, warn_unanswered_tags


REPO = Path(__file__).resolve().parents[2]
UNITS = "Think in <think> </think>. Convert with <convert> 3 km to m </convert>; see <result> </result>. <answer> </answer>"
ARPO = "<think> a </think> <search> q </search> <result> r </result> <python> c </python> <answer> \\boxed{} </answer>"


def test_unanswered_tags():
    assert unanswered_tags([UNITS], ["python", "search"]) == ["convert"]
    assert unanswered_tags([UNITS, None, ""], ["convert"]) == []
    assert unanswered_tags([ARPO], ["python", "search"]) == []
    assert unanswered_tags([ARPO], ["python"]) == ["search"]
    assert unanswered_tags(["a <b> without its closing tag", "x <br> y"], []) == []  # only tags opened and closed


def test_warning_names_the_tags_the_tools_and_the_fix(plugin_caplog):
    executor = SimpleNamespace(tools={"python": object(), "search": object()})
    with plugin_caplog.at_level("WARNING"):
        assert warn_unanswered_tags([UNITS, UNITS], executor, "the system prompts of units_rl (train)") == ["convert"]
    (message,) = {r.getMessage() for r in plugin_caplog.records}  # one warning (caplog may see it twice)
    assert message.startswith("[agentic-tools] the system prompts of units_rl (train) name <convert> ... </convert>, "
                              "which no configured tool answers (this run's tools: <python>, <search>)")  # fmt: skip
    assert "agentic_tool_config" in message and "PYTHONPATH" in message
    plugin_caplog.clear()
    with plugin_caplog.at_level("WARNING"):
        assert warn_unanswered_tags([UNITS], SimpleNamespace(tools={"convert": object()}), "x") == []
        assert warn_unanswered_tags([UNITS], SimpleNamespace(), "x") == []  # an executor that does not list its tools
    assert not plugin_caplog.records


def test_no_tool_call_warning():
    message = no_tool_call_warning("validation", 0, 8)
    assert message.startswith("this validation made 0 tool calls in 8 trajectories") and "agentic SFT" in message
    assert no_tool_call_warning("evaluation", 1, 8) is None and no_tool_call_warning("evaluation", 0, 0) is None


def test_reward_module_not_on_the_path_is_one_traceback_with_the_fix():
    """It was three chained tracebacks (ModuleNotFoundError, two ValueErrors) and no fix."""
    code = (
        "from llamafactory_agentic.rewards.registry import check_reward_arguments\n"
        "check_reward_arguments('units_reward_not_here:score', 'f1', 0.1)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 1 and proc.stderr.count("Traceback") == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: `agentic_reward: units_reward_not_here:score`: cannot import reward module")
    assert "put its folder on PYTHONPATH" in last and "units_reward_not_here.py" in last


def test_reward_module_that_fails_inside_keeps_its_own_traceback(tmp_path):
    (tmp_path / "broken_reward_mod.py").write_text("import a_dependency_that_is_missing\n")
    code = (
        "from llamafactory_agentic.rewards.registry import check_reward_arguments\n"
        "check_reward_arguments('broken_reward_mod:score', 'f1', 0.1)\n"
    )
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 1 and proc.stderr.count("Traceback") == 2, proc.stderr  # the module's line, then ours
    assert 'broken_reward_mod.py", line 1' in proc.stderr and "a_dependency_that_is_missing" in proc.stderr
