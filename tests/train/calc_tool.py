# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""A user tool outside the plugin, named in a tool config as `calc_tool:CalcTool` (tests of issue 28 item 1).

It evaluates integer arithmetic (`+ - * // %` and parentheses) with the `ast` module: a real `BaseTool` with its own
tag `<calc>…</calc>`, like any tool a user registers.
"""

import ast
import operator

from llamafactory_agentic.tools import BaseTool, ToolError, ToolOutput


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def _eval(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval(node.operand)
    raise ToolError(f"unsupported expression: {ast.dump(node)[:60]}")


class CalcTool(BaseTool):
    """`<calc> 1 + 2 </calc>` -> `3`."""

    name = "calc"
    default_tag = "calc"

    def run(self, args: str) -> ToolOutput:
        try:
            tree = ast.parse(args, mode="eval")
        except SyntaxError as exc:
            raise ToolError(f"not an expression: {exc.msg}") from None
        return ToolOutput(str(_eval(tree)))
