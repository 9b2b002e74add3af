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

r"""Pure tensor functions of ARPO/AEPO training: advantages, policy losses, KL and entropy terms (no model needed).

Functions are registered by name (idea from verl's `core_algos`): `get_advantage_estimator("soft" | "hard")` and
`get_policy_loss("arpo" | "aepo" | "ppo_clip" | "gspo" | "dr_grpo" | "cispo")`; register your own with `register_advantage_estimator` /
`register_policy_loss` and select it with `arpo_advantage_attribution` / `rl_policy_loss`. A registered function gets
the run's loss config object (`train.arpo.config.ArpoLossConfig`) as its `config` argument.
"""

from .advantages import (
    batch_shared_lengths,
    broadcast_advantages,
    compute_grpo_advantages,
    compute_hard_attribution_advantages,
    compute_hard_attribution_from_lineage,
    compute_soft_attribution_advantages,
    hard_estimator,
    lineage_shared_lengths,
    soft_estimator,
)
from .aggregation import LOSS_AGG_MODES, aggregate_loss
from .entropy import (
    entropy_aware_advantages,
    entropy_from_logits,
    entropy_from_logits_chunked,
    entropy_zscore,
    high_entropy_mask,
)
from .policy_loss import (
    compute_aepo_policy_loss,
    compute_entropy_loss,
    compute_kl_loss,
    compute_policy_loss,
    low_var_kl,
    masked_mean,
    ppo_clip_loss,
)
from .policy_loss_variants import (
    cispo_loss,
    compute_cispo_loss,
    compute_gspo_loss,
    dr_grpo_loss,
    gspo_loss,
    resolve_loss_settings,
)
from .registry import (
    accepts_keyword,
    get_advantage_estimator,
    get_policy_loss,
    list_advantage_estimators,
    list_policy_losses,
    register_advantage_estimator,
    register_policy_loss,
)


__all__ = [
    "LOSS_AGG_MODES",
    "accepts_keyword",
    "aggregate_loss",
    "cispo_loss",
    "compute_cispo_loss",
    "compute_gspo_loss",
    "dr_grpo_loss",
    "gspo_loss",
    "resolve_loss_settings",
    "hard_estimator",
    "ppo_clip_loss",
    "soft_estimator",
    "batch_shared_lengths",
    "broadcast_advantages",
    "compute_aepo_policy_loss",
    "compute_entropy_loss",
    "compute_grpo_advantages",
    "compute_hard_attribution_advantages",
    "compute_hard_attribution_from_lineage",
    "compute_kl_loss",
    "compute_policy_loss",
    "compute_soft_attribution_advantages",
    "entropy_aware_advantages",
    "entropy_from_logits",
    "entropy_from_logits_chunked",
    "entropy_zscore",
    "get_advantage_estimator",
    "get_policy_loss",
    "high_entropy_mask",
    "lineage_shared_lengths",
    "list_advantage_estimators",
    "list_policy_losses",
    "low_var_kl",
    "masked_mean",
    "register_advantage_estimator",
    "register_policy_loss",
]
