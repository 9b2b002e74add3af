# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

r"""Your tool: `<convert> 3.5 km to m </convert>` -> `3500 m` (written by `llamafactory-agentic task init`; edit it).

A tool is a `BaseTool` subclass named in the tool config as `module:Class` (`tools.yaml`: `units_tool:ConvertTool`);
its module must be importable, so run training and evaluation with this folder on `PYTHONPATH` (docs/tutorial.md).
`run(args)` receives the text the model wrote between the tags and returns a `ToolOutput(text)`; raise `ToolError`
for a call that is wrong (the model reads the message as its observation) and `TransientToolError` for one worth
retrying. The rollout stops on `</convert>`, runs the call and inserts ` <result>\n{text}\n</result>`.
"""

import re

from llamafactory_agentic.tools import BaseTool, ToolError, ToolOutput


# factor to the dimension's base unit (metre, gram, second)
UNITS = {
    "mm": ("length", 0.001), "cm": ("length", 0.01), "m": ("length", 1.0), "km": ("length", 1000.0),
    "in": ("length", 0.0254), "ft": ("length", 0.3048), "mi": ("length", 1609.344),
    "g": ("mass", 1.0), "kg": ("mass", 1000.0), "lb": ("mass", 453.59237),
    "s": ("time", 1.0), "min": ("time", 60.0), "h": ("time", 3600.0),
}  # fmt: skip
CALL = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z]+)\s+(?:to|in)\s+([A-Za-z]+)\s*$")


def convert(value: float, source: str, target: str) -> float:
    """`value` in unit `source` expressed in unit `target` (both keys of `UNITS`, of one dimension)."""
    (dim_a, factor_a), (dim_b, factor_b) = UNITS[source], UNITS[target]
    if dim_a != dim_b:
        raise ToolError(f"cannot convert {dim_a} ({source}) to {dim_b} ({target})")
    return round(value * factor_a / factor_b, 6)


class ConvertTool(BaseTool):
    """Unit conversion: `VALUE UNIT to UNIT`, units of `UNITS`."""

    name = "convert"
    default_tag = "convert"

    def run(self, args: str) -> ToolOutput:
        """`3.5 km to m` -> `ToolOutput("3500 m")`; a malformed call or an unknown unit raises `ToolError`."""
        match = CALL.match(args)
        if match is None:
            raise ToolError("write VALUE UNIT to UNIT, e.g. 3.5 km to m")
        value, source, target = float(match[1]), match[2], match[3]
        unknown = [u for u in (source, target) if u not in UNITS]
        if unknown:
            raise ToolError(f"unknown unit {unknown[0]!r}; known: {' '.join(UNITS)}")
        return ToolOutput(f"{convert(value, source, target):g} {target}")
