# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The tools tests' fake HTTP server (a stand-in for the web search APIs, which the test machines cannot reach)."""

from tools.conftest import fake_server  # noqa: F401
