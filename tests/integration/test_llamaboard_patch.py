# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The LLaMA-Board patch: applied by the start-up hook when the web UI is imported, precondition, built UI."""

import json
import os
import subprocess
import sys
import types

import pytest

import _llamafactory_agentic_hook as hook
from llamafactory_agentic.integration import data_registration, patches


def test_hook_watches_every_patched_module():
    assert hook.WATCHED == set(patches.PATCHES) | set(patches.LLAMABOARD_PATCHES) | set(data_registration.DATA_MODULES)


@pytest.mark.slow
def test_webui_import_is_patched_in_a_fresh_process():
    code = (
        "import json\n"
        "import llamafactory.webui.interface as interface\n"
        "from llamafactory.webui.runner import Runner\n"
        "from llamafactory_agentic.integration.activation import active_patches\n"
        "print(json.dumps({'patches': active_patches(),"
        " 'tab': getattr(interface.create_train_tab, '__agentic_patched__', False),"
        " 'runner': getattr(Runner._initialize, '__agentic_patched__', False)}))\n"
    )
    env = dict(os.environ)
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["patches"][-1] == "llamafactory.webui.interface"
    assert report["tab"] and report["runner"]


def test_precondition_names_the_supported_release():
    with pytest.raises(patches.PatchError, match=r"cannot patch .*llamafactory==0\.9\.5"):
        patches.patch_llamaboard(types.ModuleType("llamafactory.webui.interface"))


def test_train_tab_carries_the_panel():
    """LLaMA-Board's UI built in-process: the panel's fields are inputs of Preview/Start/Save/Load, labelled."""
    from llamafactory_agentic.integration.activation import register

    register()
    from llamafactory.webui.interface import create_ui

    from llamafactory_agentic.webui.fields import panel_fields

    demo = create_ui()
    config = demo.get_config_file()
    by_id = {c["id"]: c for c in config["components"]}
    labels = {c["props"].get("label"): c["id"] for c in config["components"]}
    field_ids = {
        labels[label]
        for label in (
            "Group size M (arpo_rollout_n)",
            "Tool config file (agentic_tool_config)",
            "Reward function (agentic_reward)",
            "AEPO variant (aepo_variant)",
        )
    }
    preview = next(d for d in config["dependencies"] if d.get("api_name") == "preview_train")
    assert field_ids <= set(preview["inputs"])
    load = next(d for d in config["dependencies"] if d.get("api_name") == "load_args")
    assert field_ids <= set(load["outputs"])
    rl_plot = next(c for c in config["components"] if c["props"].get("elem_id") == "agentic_rl_plot")
    assert rl_plot["type"] == "plot"
    assert len({f.name for f in panel_fields()}) == len(
        [c for c in by_id.values() if str(c["props"].get("elem_id", "")).startswith("ag-")]
    )
