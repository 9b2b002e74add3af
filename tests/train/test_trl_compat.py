# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The trainer's TRL import works beside vLLM 0.22, whose `sampling_params` lacks TRL 0.24's `GuidedDecodingParams`.

On the H200 with the `[vllm]` extra (vLLM 0.22.1) installed, every `arpo` run died at import:
`ImportError: cannot import name 'GuidedDecodingParams' from 'vllm.sampling_params'` (TRL's `grpo_trainer` imports
it at module level when it finds vLLM). vLLM needs a GPU and cannot be installed on this machine, so a stand-in
package is put on the path: a `vllm` module with vLLM 0.22's relevant shape (a `sampling_params` module without that
class) and a dist-info, so that TRL's package check finds version 0.22.1. TRL's own import fails on it; the plugin's
trainer imports.
"""

import subprocess
import sys
import textwrap

import pytest


def _fake_vllm(root):
    pkg = root / "vllm"
    pkg.mkdir()
    (pkg / "__init__.py").write_text('__version__ = "0.22.1"\n')
    (pkg / "sampling_params.py").write_text(
        "class SamplingParams:\n    pass\n\n\nclass StructuredOutputsParams:\n    pass\n"
    )
    info = root / "vllm-0.22.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.22.1\n")
    (info / "RECORD").write_text("")


def _run(code: str, path) -> subprocess.CompletedProcess:
    env_code = f"import sys; sys.path.insert(0, {str(path)!r})\n" + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # a subprocess importing the trainer
def test_trainer_imports_with_vllm_022_installed(tmp_path):
    _fake_vllm(tmp_path)
    # the stand-in is what TRL sees: found, version 0.22.1, and TRL's own import of GRPOTrainer reaches into vLLM's
    # modules and fails (on the GPU machine at `GuidedDecodingParams`; here at the first module the stand-in lacks)
    plain = _run(
        """
        import trl.import_utils as u
        print("found", bool(u._vllm_available[0] if isinstance(u._vllm_available, tuple) else u._vllm_available))
        from trl.trainer.grpo_trainer import GRPOTrainer
        """,
        tmp_path,
    )
    assert "found True" in plain.stdout, plain.stdout + plain.stderr
    assert plain.returncode != 0
    assert "from vllm" in plain.stderr and "grpo_trainer" in plain.stderr, plain.stderr[-3000:]

    ours = _run(
        """
        from llamafactory_agentic.train import trl_compat
        from llamafactory_agentic.train.arpo.trainer import ArpoTrainer
        import vllm.sampling_params  # the stand-in is still importable for the plugin's own engine
        print("disabled", trl_compat.TRL_VLLM_DISABLED, ArpoTrainer.__name__)
        """,
        tmp_path,
    )
    assert ours.returncode == 0, ours.stderr[-3000:]
    assert "disabled True ArpoTrainer" in ours.stdout
