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

"""One declaration and one validator per key (issue 26, item 2).

Every key's default is declared once (hparams.py or its stage preset); the run configs are built from the parsed
arguments in one place (`train/arpo/config.py`) with no field defaults; one validator module
(`llamafactory_agentic/validation.py`) serves the parser, LLaMA-Board's checks and the tool executor; losses and
advantage estimators get the config object and are selected by any registered name.
"""

import ast
import dataclasses
import pathlib
from types import SimpleNamespace

import pytest
from llamafactory.hparams import FinetuningArguments

from llamafactory_agentic.algorithms import register_advantage_estimator, registry
from llamafactory_agentic.hparams import agentic_field_names
from llamafactory_agentic.integration.patches import build_finetuning_arguments_class
from llamafactory_agentic.rollout import RolloutConfig
from llamafactory_agentic.tools import build_executor_from_args
from llamafactory_agentic.train.arpo import batch
from llamafactory_agentic.train.arpo.config import ArpoLossConfig, ToolsConfig, default_loss_config
from llamafactory_agentic.webui.checks import check_values

from ._helpers import record


PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "llamafactory_agentic"
# the one place that builds run configs from the arguments, and the validator that resolves the tool keys of an
# object built by hand (the synthetic task, the standalone tool command)
BUILDERS = {PACKAGE / "train" / "arpo" / "config.py", PACKAGE / "validation.py"}


def _key_fallbacks(path: pathlib.Path) -> list[str]:
    r"""`getattr(x, "<plugin key>", default)` calls in `path`: a second declaration of that key's default."""
    keys = agentic_field_names()
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) == 3
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in keys
        ):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_key_default_is_declared_a_second_time_by_a_getattr_fallback():
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in BUILDERS for hit in _key_fallbacks(path)]
    assert not found, "defaults come from hparams.py or the preset, not from a fallback:\n" + "\n".join(found)


def test_the_grep_sees_a_fallback(tmp_path):
    # the check above can fail: a file with one fallback is reported
    path = PACKAGE / "train" / "_probe_fallback.py"
    try:
        path.write_text('def f(args):\n    return getattr(args, "rl_dynamic_sampling_max_batches", 3)\n')
        assert len(_key_fallbacks(path)) == 1
    finally:
        path.unlink()


@pytest.mark.parametrize("config", [RolloutConfig, ArpoLossConfig, ToolsConfig])
def test_run_configs_declare_no_defaults(config):
    defaulted = [
        f.name
        for f in dataclasses.fields(config)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]
    assert defaulted == []


def _records(branch: bool = False):
    # two members of one group with rewards 0 and 1, three trained tokens each; with `branch` member 1 is a branch
    # of member 0 copied after 2 tokens
    return [record(0, 0, 0.0, mask=(1, 1, 1)), record(0, 1, 1.0, mask=(1, 1, 1), parent=0 if branch else None)]


def test_a_registered_advantage_estimator_is_selected_by_its_key():
    seen = []

    @register_advantage_estimator("test_reward_as_advantage")
    def reward_as_advantage(rewards, group_ids, response_mask, config, *, parents, branch_pos, lengths):
        seen.append(config)
        return rewards[:, None] * response_mask, response_mask

    try:
        # the parser accepts the name (the key is a registry name, not a fixed choice) ...
        args = build_finetuning_arguments_class(FinetuningArguments)(
            stage="arpo", arpo_advantage_attribution="test_reward_as_advantage"
        )
        assert args.arpo_advantage_attribution == "test_reward_as_advantage"
        # ... the run config selects it, and the estimator receives the run's config object
        config = default_loss_config(arpo_advantage_attribution="test_reward_as_advantage")
        advantages, masks = batch.token_advantages(_records(), config)
        assert advantages == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]] and masks == [[1, 1, 1], [1, 1, 1]]
        assert seen == [config]
    finally:
        registry._ADVANTAGE_ESTIMATORS.pop("test_reward_as_advantage", None)
    with pytest.raises(ValueError, match=r"Unknown `arpo_advantage_attribution` 'test_reward_as_advantage'.*'hard'"):
        default_loss_config(arpo_advantage_attribution="test_reward_as_advantage")


def test_built_in_estimators_read_their_settings_from_the_config():
    records = _records(branch=True)
    _, plain = batch.token_advantages(records, default_loss_config(arpo_advantage_attribution="hard"))
    _, dedup = batch.token_advantages(
        records, default_loss_config(arpo_advantage_attribution="hard", arpo_hard_dedup=True)
    )
    assert plain == [[1, 1, 1], [1, 1, 1]] and dedup == [[1, 1, 1], [0, 0, 1]]  # `arpo_hard_dedup` reached it


BAD_RETRIES = "recipe key `agentic_tool_retries` must be a whole number >= 1, got 0"


def test_one_validator_for_the_parser_the_board_and_the_executor():
    # the parser (before: accepted, the run failed later when the executor was built)
    with pytest.raises(ValueError, match=BAD_RETRIES):
        build_finetuning_arguments_class(FinetuningArguments)(stage="arpo", agentic_tool_retries=0)
    # LLaMA-Board's checks
    findings = check_values("arpo", {"agentic_tool_retries": 0})
    assert [(f.level, f.message) for f in findings if f.level == "error"] == [("error", BAD_RETRIES)]
    # the tool executor
    with pytest.raises(ValueError, match=BAD_RETRIES):
        build_executor_from_args(SimpleNamespace(agentic_tool_retries=0))


def test_the_evaluation_protocol_checks_the_tool_keys_with_the_same_validator():
    from llamafactory_agentic.evaluation.config import EvalArguments, EvalConfigError, resolve_protocol

    # before: `agentic_search_topk: 0` was recorded in the protocol unchecked and failed later in the search tool
    with pytest.raises(EvalConfigError, match="recipe key `agentic_search_topk` must be a whole number > 0, got 0"):
        resolve_protocol(EvalArguments(), SimpleNamespace(agentic_search_topk=0))
    # keys the evaluation's arguments do not carry take their declared defaults
    tools = resolve_protocol(EvalArguments(), SimpleNamespace()).tools
    assert (tools["search_topk"], tools["python_timeout"]) == (10, 120.0)


def test_the_board_imports_no_private_validator():
    tree = ast.parse((PACKAGE / "webui" / "checks.py").read_text(encoding="utf-8"))
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("_") and "llamafactory" not in (node.module or "")
    ]
    assert private == []
