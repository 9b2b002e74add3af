# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""LLaMA-Factory integration: activation, the stage registry and every patch (the only code touching its internals)."""
