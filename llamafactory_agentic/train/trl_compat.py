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

"""The single place the trainer imports TRL from, after making TRL 0.24 work with Transformers 5.

TRL 0.24 computes its optional-package flags as `_x_available = _is_package_available("x")`. Transformers 5 changed
that helper to always return a `(exists, version)` tuple, so every flag is a non-empty tuple and thus truthy: TRL then
imports packages that are not installed (`mergekit` in `trl.trainer.callbacks`, pulled in by `GRPOTrainer`). We
replace each tuple flag with its boolean first element before any TRL trainer module is imported. On a TRL/Transformers
pair without the problem nothing changes.

TRL's vLLM flag is turned off as well: the plugin drives vLLM itself (`rollout/vllm_engine.py`) and never uses TRL's
`use_vllm` paths, while TRL 0.24's `grpo_trainer` imports `vllm.sampling_params.GuidedDecodingParams` at module level
whenever vLLM is installed; vLLM 0.22 (the `[vllm]` extra) no longer has that class, so with the extra installed the
`arpo` stage died at import (`ImportError: cannot import name 'GuidedDecodingParams'`, seen on the H200).
"""

import trl.import_utils as _trl_import_utils


def fix_trl_availability_flags() -> list[str]:
    r"""Turn TRL's tuple-valued `_<package>_available` flags into booleans; return the names fixed."""
    fixed = []
    for name, value in list(vars(_trl_import_utils).items()):
        if name.startswith("_") and name.endswith("_available") and isinstance(value, tuple) and value:
            setattr(_trl_import_utils, name, bool(value[0]))
            fixed.append(name)
    return fixed


def disable_trl_vllm() -> bool:
    r"""Make TRL believe vLLM is absent (its vLLM code paths are unused here); return whether it had found vLLM."""
    found = bool(getattr(_trl_import_utils, "_vllm_available", False))
    _trl_import_utils._vllm_available = False
    return found


FIXED_FLAGS = fix_trl_availability_flags()
TRL_VLLM_DISABLED = disable_trl_vllm()

from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.models import prepare_deepspeed, unwrap_model_for_generation  # noqa: E402
from trl.trainer.utils import pad, selective_log_softmax  # noqa: E402


__all__ = [
    "FIXED_FLAGS",
    "TRL_VLLM_DISABLED",
    "GRPOConfig",
    "GRPOTrainer",
    "pad",
    "prepare_deepspeed",
    "selective_log_softmax",
    "unwrap_model_for_generation",
]
