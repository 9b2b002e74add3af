# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

r"""The plugin's off switch, read by activation (`integration/activation.py`) and by the layers that need the plugin.

`LLAMAFACTORY_AGENTIC_DISABLE=1` turns the start-up hook off (`_llamafactory_agentic_hook.py` reads the same name) and
makes `register()` refuse; the evaluation harness refuses to start with it set (it needs the plugin's parser keys).
"""

import os


DISABLE_ENV = "LLAMAFACTORY_AGENTIC_DISABLE"


def is_disabled() -> bool:
    r"""True when `LLAMAFACTORY_AGENTIC_DISABLE` is set to a true value."""
    return os.environ.get(DISABLE_ENV, "0").lower() in ("1", "true", "y", "yes")
