# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Activation of the plugin inside LLaMA-Factory: start-up hook, register(), version and precondition checks."""

import json
import os
import subprocess
import sys
import types

import pytest

from llamafactory_agentic.integration import activation, patches


PATCHED_MODULES = list(patches.PATCHES)


def run_python(code: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env, timeout=timeout)


PROBE = (
    "import json, sys\n"
    "import llamafactory.train.tuner, llamafactory.data, llamafactory.launcher\n"
    "from llamafactory_agentic.integration.activation import active_patches, hook_installed\n"
    "from llamafactory.extras.constants import TRAINING_STAGES\n"
    "print(json.dumps({'hook': hook_installed(), 'patches': active_patches(), 'stages': list(TRAINING_STAGES.values())}))\n"
)


@pytest.mark.slow
def test_hook_patches_every_module_in_a_fresh_process():
    proc = run_python(PROBE)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["hook"] is True
    assert report["patches"] == PATCHED_MODULES
    assert {"agentic_sft", "arpo", "aepo"} <= set(report["stages"])


@pytest.mark.slow
def test_disable_env_turns_the_hook_off():
    proc = run_python(PROBE, env={"LLAMAFACTORY_AGENTIC_DISABLE": "1"})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report == {"hook": False, "patches": [], "stages": ["sft", "rm", "ppo", "dpo", "kto", "pt"]}


def test_process_without_llamafactory_loads_only_the_tiny_hook():
    # setuptools' own finder of an editable install (`__editable___...`) is not part of the plugin
    code = (
        "import sys, json; print(json.dumps(sorted(m for m in sys.modules if not m.startswith('__editable__')"
        " and ('agentic' in m or m.startswith(('llamafactory', 'torch', 'transformers'))))))"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == ["_llamafactory_agentic_hook"]


@pytest.mark.slow
def test_register_patches_an_already_imported_llamafactory():
    code = (
        "import sys, json, _llamafactory_agentic_hook as hook\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, hook.LlamaFactoryWatcher)]\n"
        "import llamafactory.train.tuner, llamafactory.data, llamafactory.extras.constants\n"
        "from llamafactory_agentic.integration.activation import active_patches\n"
        "before = active_patches()\n"
        "import llamafactory_agentic\n"
        "after = llamafactory_agentic.register()\n"
        "again = llamafactory_agentic.register()\n"
        "print(json.dumps([before, after, again]))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    before, after, again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert before == [] and after == PATCHED_MODULES and again == PATCHED_MODULES


def test_register_refuses_when_disabled(monkeypatch):
    monkeypatch.setenv("LLAMAFACTORY_AGENTIC_DISABLE", "1")
    with pytest.raises(RuntimeError, match="LLAMAFACTORY_AGENTIC_DISABLE"):
        activation.register()


def test_unsupported_llamafactory_version_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(activation, "llamafactory_version", lambda: "0.9.4")
    with pytest.raises(patches.PatchError, match=r"supports llamafactory==0\.9\.5 \(found llamafactory 0\.9\.4\)"):
        activation.check_version()


@pytest.mark.slow
def test_unsupported_version_fails_llamafactory_cli_with_the_message():
    code = (
        "import importlib.metadata as md\n"
        "real = md.version\n"
        "md.version = lambda name: '0.9.9' if name == 'llamafactory' else real(name)\n"
        "import llamafactory.hparams.parser\n"
    )
    proc = run_python(code)
    assert proc.returncode != 0
    assert "supports llamafactory==0.9.5 (found llamafactory 0.9.9)" in proc.stderr
    assert "LLAMAFACTORY_AGENTIC_DISABLE=1" in proc.stderr


@pytest.mark.parametrize(
    "patch, module_name",
    [
        (patches.patch_constants, "llamafactory.extras.constants"),
        (patches.patch_parser, "llamafactory.hparams.parser"),
        (patches.patch_tuner, "llamafactory.train.tuner"),
    ],
)
def test_failed_precondition_names_the_supported_version(patch, module_name):
    fake = types.ModuleType(module_name)
    with pytest.raises(patches.PatchError, match=r"cannot patch .*llamafactory==0\.9\.5"):
        patch(fake)


def test_tuner_patch_is_idempotent():
    import llamafactory.train.tuner as tuner

    activation.register()
    patched = tuner._training_function
    patches.patch_tuner(tuner)
    assert tuner._training_function is patched


def test_llamaboard_lists_the_plugin_stages():
    """LLaMA-Board's stage drop-down reads TRAINING_STAGES; its training subprocess is `llamafactory-cli train`."""
    activation.register()
    from llamafactory.extras.constants import TRAINING_STAGES
    from llamafactory.webui.control import change_stage

    from llamafactory_agentic.common.stages import STAGES

    for spec in STAGES.values():
        assert TRAINING_STAGES[spec.display_name] == spec.name
        datasets, packing = change_stage(spec.display_name)
        assert datasets == [] and packing is False


@pytest.mark.slow
@pytest.mark.parametrize("first", ["converters", "inline_template"])
def test_plugin_data_module_imported_first_is_registered_by_the_hook(first):
    # The plugin's data module is what imports LLaMA-Factory's data package here, so `patch_data` runs while that
    # module is still executing; the hook registers it once it is complete (no data module imports `integration`).
    code = (
        "import json, sys\n"
        f"import llamafactory_agentic.data.{first}\n"
        "from llamafactory.data.converter import DATASET_CONVERTERS\n"
        "from llamafactory.data.template import TEMPLATES\n"
        "from llamafactory_agentic.data import converters\n"
        "print(json.dumps({'rl': DATASET_CONVERTERS.get('arpo_rl') is converters.ArpoRLDatasetConverter,\n"
        "  'sft': DATASET_CONVERTERS.get('arpo_sft') is converters.ArpoSFTDatasetConverter,\n"
        "  'templates': sorted(n for n in TEMPLATES if n.endswith('_agentic')),\n"
        "  'integration': sorted(m for m in sys.modules if m.startswith('llamafactory_agentic.integration'))}))\n"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["rl"] and report["sft"]
    assert report["templates"] == ["llama3_agentic", "qwen3_agentic", "qwen3_nothink_agentic", "qwen_agentic"]
    assert "llamafactory_agentic.integration.data_registration" in report["integration"]  # registered by activation
