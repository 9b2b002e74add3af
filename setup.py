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

"""Packaging of llamafactory-agentic (ships the start-up `.pth` hook with regular and editable installs)."""

import os
import re

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py


try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # setuptools < 64 has no PEP 660 editable installs
    editable_wheel = None


PTH_NAME = "llamafactory_agentic.pth"


def get_version() -> str:
    """Version string from `llamafactory_agentic/__init__.py`."""
    with open(os.path.join("llamafactory_agentic", "__init__.py"), encoding="utf-8") as f:
        return re.search(r'__version__ = "([^"]+)"', f.read()).group(1)


def get_requires() -> list[str]:
    """Install requirements from `requirements.txt` (comments and pip options skipped)."""
    with open("requirements.txt", encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith(("#", "-"))]


class BuildPyWithPth(build_py):
    r"""Ship `llamafactory_agentic.pth` at the top of site-packages.

    Python executes the `.pth` line at start-up in every process of the environment; it imports a ~40-line hook that
    waits for LLaMA-Factory's modules to be imported and patches them then (see `_llamafactory_agentic_hook.py`).
    """

    def run(self) -> None:
        """Build the package, then copy the `.pth` file next to it."""
        super().run()
        self.copy_file(PTH_NAME, os.path.join(self.build_lib, PTH_NAME), preserve_mode=0)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        """Declare the `.pth` file as an output so that wheels include it."""
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH_NAME)]


cmdclass = {"build_py": BuildPyWithPth}
if editable_wheel is not None:

    class EditableWheelWithPth(editable_wheel):
        r"""Put the start-up `.pth` into editable wheels too (`pip install -e .`).

        `_install_namespaces(unpacked_wheel_dir, name)` is the step where setuptools writes extra top-level files of
        the editable wheel; everything in that directory ends up in site-packages.
        """

        def _install_namespaces(self, installation_dir, pth_prefix):
            super()._install_namespaces(installation_dir, pth_prefix)
            self.copy_file(PTH_NAME, os.path.join(installation_dir, PTH_NAME), preserve_mode=0)

    cmdclass["editable_wheel"] = EditableWheelWithPth


extra_require = {
    # vLLM 0.22-0.23 pin torch==2.11.0 (requirements.txt); 0.24-0.26 need starlette>=1.0.1, which gradio 5.50
    # (LLaMA-Factory 0.9.5's cap) refuses; 0.27 and later pin torch 2.13 or newer. See README "Optional parts".
    "vllm": ["vllm>=0.22.1,<=0.23.0"],
    "deepspeed": ["deepspeed>=0.10.0,<=0.16.9"],  # LLaMA-Factory 0.9.5's range
    # MCP client tool (tools/mcp_tool.py): the mcp 2.x client API (`mcp.Client`, `streamable_http_client`)
    "mcp": ["mcp>=2.3.0,<3"],
    "browse": ["beautifulsoup4>=4.12"],  # HTML to text for the `browse` search mode (tools/browse.py)
    # playwright: the browser tests drive the system's chromium; pytest-xdist: `make test` runs the suite on every
    # core; mcp: the MCP tool tests start a real MCP server; beautifulsoup4: the browse tests;
    # prometheus-fastapi-instrumentator: vLLM's server's /metrics middleware, checked against the pinned FastAPI
    "dev": [
        "pytest",
        "pytest-xdist",
        "ruff",
        "playwright",
        "mcp>=2.3.0,<3",
        "beautifulsoup4>=4.12",
        "prometheus-fastapi-instrumentator>=7.0.0",
    ],
}


setup(
    name="llamafactory-agentic",
    version=get_version(),
    author="llamafactory-agentic developers",
    description="Agentic RL with tools (ARPO, AEPO) as LLaMA-Factory training stages",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache 2.0 License",
    python_requires=">=3.10.0",
    # namespace discovery: resources/ holds data folders without __init__.py, shipped as package data
    packages=find_namespace_packages(include=["llamafactory_agentic", "llamafactory_agentic.*"]),
    py_modules=["_llamafactory_agentic_hook"],
    package_data={"llamafactory_agentic": ["py.typed", "resources/*", "resources/**/*"]},
    include_package_data=True,
    # the benchmark registry of `llamafactory-agentic eval` (read from the repository in editable installs)
    data_files=[("share/llamafactory_agentic/evaluation", ["evaluation/benchmarks.yaml"])],
    install_requires=get_requires(),
    extras_require=extra_require,
    entry_points={"console_scripts": ["llamafactory-agentic = llamafactory_agentic.cli:main"]},
    cmdclass=cmdclass,
)
