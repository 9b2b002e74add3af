# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The engine registry and its declared capabilities (issue 36, Deliver 1)."""

import re
from pathlib import Path

import pytest

from llamafactory_agentic.rollout.engine import (
    EngineCapabilities,
    GenerationEngine,
    build_engine,
    capabilities_of,
    engine_spec,
    register_engine,
)
from llamafactory_agentic.rollout.session import RolloutSession


PACKAGE = Path(__file__).resolve().parents[2] / "llamafactory_agentic"


def test_builtin_engines_declare_their_capabilities():
    from llamafactory_agentic.rollout.hf_engine import HFEngine
    from llamafactory_agentic.rollout.vllm_engine import VLLMEngine

    hf, vllm = engine_spec("hf").capabilities, engine_spec("vllm").capabilities
    assert hf.shares_policy_weights and not vllm.shares_policy_weights
    assert hf.returns_logprobs and vllm.returns_logprobs and hf.prefix_branching and vllm.prefix_branching
    assert HFEngine.capabilities == hf and VLLMEngine.capabilities == vllm


def test_a_registered_engine_is_built_by_name_and_its_capabilities_reach_the_session():
    class ServerEngine(GenerationEngine):
        capabilities = EngineCapabilities(separate_process=True, returns_logprobs=True)

        def __init__(self, model):
            self.model = model

        def generate(self, requests, sampling):
            return []

    register_engine("test-server", ServerEngine.capabilities, lambda model, tok, cfg, **kw: ServerEngine(model))
    with pytest.raises(ValueError, match="already registered"):
        register_engine("test-server", ServerEngine.capabilities, lambda *a, **k: None)
    engine = build_engine("test-server", "policy", None, None)
    assert isinstance(engine, ServerEngine) and engine.model == "policy"

    class Agent:
        config = type("C", (), {"backend": "test-server"})()

    agent = Agent()
    agent.engine = engine
    session = RolloutSession(agent)
    assert session.capabilities.separate_process and not session.capabilities.shares_policy_weights
    session.sync_weights("new policy", version=3)
    assert engine.weight_version == 3
    # an engine without a declaration (a test double) gets the capabilities registered under the configured name
    assert capabilities_of(object(), "hf") == engine_spec("hf").capabilities
    with pytest.raises(ValueError, match="Unknown rollout backend 'nope'.*'hf'"):
        build_engine("nope", None, None, None)


def test_no_code_outside_the_engines_compares_a_backend_name():
    """Before: the trainer and the step tested `session.backend == "hf"`."""
    pattern = re.compile(r"""backend\s*[!=]=\s*["'](hf|vllm)["']""")
    offenders = []
    for folder in ("train", "rollout"):
        for path in (PACKAGE / folder).rglob("*.py"):
            if path.name in ("engine.py", "hf_engine.py", "vllm_engine.py"):
                continue
            offenders += [
                f"{path.name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)
            ]
    assert offenders == []
