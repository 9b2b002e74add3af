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

"""Defaults in one home: the standalone `llamafactory-agentic tool` command reads the recipe keys' declarations.

The tool classes take the constants of hparams.py as their default arguments (declared once there), so no test keeps
copies equal; this one shows that a changed declaration reaches the command.
"""

import argparse

from llamafactory_agentic.hparams import agentic_field
from llamafactory_agentic.tools.cli import add_subcommands


def _parse(*argv):
    parser = argparse.ArgumentParser()
    add_subcommands(parser.add_subparsers(dest="command"))
    return parser.parse_args(list(argv))


def test_tool_command_reads_the_defaults_from_the_dataclass_fields(monkeypatch):
    # the command re-reads the fields each time its parser is built: a changed declaration is picked up, no number
    # of its own can drift from hparams.py
    monkeypatch.setattr(agentic_field("agentic_python_timeout"), "default", 7.5)
    monkeypatch.setattr(agentic_field("agentic_search_topk"), "default", 3)
    assert _parse("tool", "python", "--code", "1").timeout == 7.5
    assert _parse("tool", "search", "--query", "q").topk == 3
