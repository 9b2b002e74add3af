# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The package's import layers (docs/architecture.md, "Layers"): no module imports a module of a higher layer.

Every module is parsed with `ast`; every `import` and `from ... import` counts, wherever it stands (module top, inside
a function, under `if TYPE_CHECKING:`), relative imports are resolved against the importing module's package, and
`from pkg import name` counts as an import of the module `pkg.name` when that is a module. Imports of other
distributions (LLaMA-Factory, TRL, ...) are not checked.
"""

import ast
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest


PACKAGE = "llamafactory_agentic"
PACKAGE_DIR = Path(__file__).resolve().parents[2] / PACKAGE

# Bottom to top; a module may import its own layer and the layers below it. Why this order (what the code shows):
# * common: logging, the stage registry, the off switch; hparams: every key's name and default; testing: tiny local
#   models. None imports another part of the plugin.
# * algorithms: pure tensor math of advantages and losses (torch only).
# * data: dataset formats, tags, inline templates (LLaMA-Factory's data classes); rewards score answers and read the
#   trajectory tags of `data`; validation (the one validator of every key: parser patch, LLaMA-Board, tool executor,
#   evaluation config) builds the reward and reads the registered losses to check their keys; tools execute calls
#   (their output tags come from `data`) and check their settings with `validation`.
# * rollout: the multi-round generation, which calls tools; train (with guards: the planner and the gaming monitor
#   read presets, train logs their checks) assembles algorithms, data, rewards, tools and rollout into a run.
# * tasks (synthetic task, demo) and evaluation (the harness, which reads training presets) use a trained model.
# * webui: LLaMA-Board's panel shows training state and presets; integration patches LLaMA-Factory and LLaMA-Board
#   with all of the above and activates the plugin; the entry points (the package's `register()`, `cli.py`) are last.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("common", ("common", "hparams", "testing")),
    ("algorithms", ("algorithms",)),
    ("data", ("data",)),
    ("rewards", ("rewards",)),
    ("validation", ("validation",)),
    ("tools", ("tools",)),
    ("rollout", ("rollout",)),
    ("train", ("train", "guards")),
    ("applications", ("tasks", "evaluation")),
    ("webui", ("webui",)),
    ("integration", ("integration",)),
    ("entry", ("", "cli")),  # "": the package's own __init__ (`register()`, `__version__`)
    ("user files", ("resources",)),  # task_skeleton/*.py: copied into a user's folder by `task init`, never imported
)

# Upward imports allowed for now, each with the issue that removes it; an entry that no longer occurs fails the test.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    source: str
    target: str
    source_layer: str
    target_layer: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}: {self.source} (layer {self.source_layer}) imports {self.target} "
            f"(layer {self.target_layer}, higher)"
        )


def module_name(package_dir: Path, path: Path) -> str:
    parts = path.relative_to(package_dir.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> tuple[int, str]:
    r"""`(index, name)` of the layer of a plugin module; raises for a module no layer names (place new packages)."""
    rest = module.removeprefix(PACKAGE).removeprefix(".")
    top = rest.split(".", 1)[0]
    for index, (name, members) in enumerate(LAYERS):
        if top in members:
            return index, name
    raise AssertionError(f"{module}: no layer lists `{top}`; add it to LAYERS and docs/architecture.md")


def imported_modules(tree: ast.AST, module: str, is_package: bool, known: set[str]) -> list[tuple[int, str]]:
    r"""`(line, module)` of every plugin module that `tree` imports, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                found.append((node.lineno, sub if sub in known else target))
    return [(line, name) for line, name in found if name == PACKAGE or name.startswith(PACKAGE + ".")]


def upward_imports(package_dir: Path) -> tuple[list[Violation], int]:
    r"""Every import of a higher layer in the package at `package_dir`, and the number of plugin imports checked."""
    files = sorted(package_dir.rglob("*.py"))
    known = {module_name(package_dir, f) for f in files}
    violations, checked = [], 0
    for path in files:
        source = module_name(package_dir, path)
        source_index, source_layer = layer_of(source)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, target in imported_modules(tree, source, path.name == "__init__.py", known):
            checked += 1
            target_index, target_layer = layer_of(target)
            if target_index > source_index:
                rel = path.relative_to(package_dir.parent).as_posix()
                violations.append(Violation(rel, line, source, target, source_layer, target_layer))
    return violations, checked


def test_no_module_imports_a_higher_layer():
    violations, checked = upward_imports(PACKAGE_DIR)
    assert checked > 300  # the walk saw the package's own imports (it does not pass on an empty tree)
    unexpected = [v for v in violations if (v.source, v.target) not in ALLOWED_UPWARD]
    assert not unexpected, "upward imports (docs/architecture.md, Layers):\n" + "\n".join(map(str, unexpected))
    stale = ALLOWED_UPWARD - {(v.source, v.target) for v in violations}
    assert not stale, f"allowed upward imports that no longer occur; remove them from ALLOWED_UPWARD: {sorted(stale)}"


def test_every_subpackage_has_a_layer():
    for path in sorted(PACKAGE_DIR.iterdir()):
        if (path / "__init__.py").is_file() or path.suffix == ".py":
            layer_of(f"{PACKAGE}.{path.stem}" if path.stem != "__init__" else PACKAGE)


@pytest.mark.parametrize(
    ("planted_in", "code", "target", "layers"),
    [
        # a relative import inside a function, as the data-registration cycle was
        (
            "data/tags.py",
            "def _planted():\n    from ..integration import activation\n",
            "integration.activation",
            ("data", "integration"),
        ),
        # `from <package> import <module>` and an absolute import
        (
            "common/log.py",
            "def _planted():\n    from llamafactory_agentic.tools import search\n",
            "tools.search",
            ("common", "tools"),
        ),
        ("tools/base.py", "import llamafactory_agentic.rollout.engine\n", "rollout.engine", ("tools", "rollout")),
        # a package's own __init__, two levels up
        (
            "train/arpo/__init__.py",
            "def _planted():\n    from ...webui import fields\n",
            "webui.fields",
            ("train", "webui"),
        ),
    ],
)
def test_checker_reports_a_planted_upward_import(tmp_path, planted_in, code, target, layers):
    copy = tmp_path / PACKAGE
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "resources"))
    before, _ = upward_imports(copy)
    path = copy / planted_in
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "\n\n" + code, encoding="utf-8")
    line = len((text + "\n\n").splitlines()) + code.splitlines().index(code.strip().splitlines()[-1]) + 1

    after, _ = upward_imports(copy)
    new = [v for v in after if v not in before]
    assert len(new) == 1, new
    assert new[0].path == f"{PACKAGE}/{planted_in}" and new[0].line == line
    assert new[0].target == f"{PACKAGE}.{target}"
    assert (new[0].source_layer, new[0].target_layer) == layers
    assert f"{PACKAGE}/{planted_in}:{line}:" in str(new[0]) and f"(layer {layers[1]}, higher)" in str(new[0])


def test_checker_accepts_downward_and_same_layer_imports(tmp_path):
    copy = tmp_path / PACKAGE
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__", "resources"))
    before, _ = upward_imports(copy)
    with (copy / "train" / "presets.py").open("a", encoding="utf-8") as f:
        f.write("\n\ndef _planted():\n    from ..guards import plan\n    from ..common.log import get_logger\n")
    assert upward_imports(copy)[0] == before
