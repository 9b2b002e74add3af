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

"""LLaMA-Board additions: the agentic panel, checks before Start, live RL plots and the rollout viewer.

* `fields`: the panel's fields, derived from `llamafactory_agentic.hparams.AgenticArguments` (types, defaults, help)
  and `llamafactory_agentic.train.presets.PRESETS`; conversion of the panel's values into `llamafactory-cli` keys and
  the effective values (presets resolved).
* `checks`: what is verified before Start (unknown keys, dataset formats, bad rows, output directory, tool config, ...).
* `monitor`: the RL metric figure from `trainer_log.jsonl` and the rollout progress line.
* `rollouts`: `rollouts.jsonl` as branch trees in HTML.
* `locales`: labels of the panel in LLaMA-Board's languages.
* `panel`: the gradio components and their events inside LLaMA-Board's Train tab.

Only `panel` imports gradio; `llamafactory_agentic.integration.llamaboard` wires it into LLaMA-Board.
"""
