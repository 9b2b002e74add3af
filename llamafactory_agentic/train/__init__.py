# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Training workflows of the plugin stages: `agentic_sft` (LLaMA-Factory SFT), `arpo`/`aepo` (TRL-based trainer)."""
