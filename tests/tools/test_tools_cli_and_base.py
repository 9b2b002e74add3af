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

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from llamafactory_agentic.tools.base import BoundedText, truncate_middle


REPO = Path(__file__).resolve().parents[2]


def _cli(*argv, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    code = "import sys; from llamafactory_agentic.tools.cli import _standalone_main; sys.exit(_standalone_main())"
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)  # fmt: skip


def _reference(text, m):
    text = text.strip()
    if len(text) <= m:
        return text
    return text[: m // 2] + f"\n[… {len(text) - m} characters omitted …]\n" + text[len(text) - (m - m // 2) :]


def test_bounded_text_matches_strip_then_truncate():
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice("ab \n\t") for _ in range(rng.randint(0, 80)))
        m = rng.randint(2, 16)
        bounded = BoundedText(m)
        i = 0
        while i < len(text):
            k = rng.randint(1, 9)
            bounded.feed(text[i : i + k])
            i += k
        assert bounded.value() == _reference(text, m), (text, m)


def test_bounded_text_bytes_split_inside_characters():
    data = ("é中" * 3000).encode("utf-8")
    bounded = BoundedText(4000)
    for i in range(0, len(data), 7):
        bounded.feed_bytes(data[i : i + 7])
    assert bounded.value() == _reference("é中" * 3000, 4000)
    assert truncate_middle("x" * 5000, 4000).count("x") == 4000


@pytest.mark.slow
def test_cli_help():
    for argv in (["--help"], ["tool", "--help"], ["tool", "python", "--help"], ["tool", "search", "--help"],
                 ["cache", "--help"], ["cache", "import", "--help"], ["cache", "export", "--help"],
                 ["cache", "stats", "--help"], ["index", "--help"], ["index", "build", "--help"]):  # fmt: skip
        proc = _cli(*argv)
        assert proc.returncode == 0 and "usage:" in proc.stdout, argv


def test_cli_python():
    proc = _cli("tool", "python", "--code", "x = 6\nx * 7", "--timeout", "5")
    assert proc.returncode == 0 and proc.stdout == "42\n"
    assert "status=ok" in proc.stderr and "isolation=" in proc.stderr
    proc = _cli("tool", "python", "--code", "while True: pass", "--timeout", "1")
    assert proc.stdout == "Execution timed out after 1 seconds.\n"


@pytest.mark.slow
def test_cli_cache_index_and_search(tmp_path, shared_data):
    source = shared_data / "arpo" / "search_cache.json"
    facts = shared_data.facts
    imported = facts["search_imported"]  # the release: 996 of 1000 (4 empty results)
    cache = tmp_path / "cache.sqlite"
    proc = _cli("cache", "import", str(source), "--cache", str(cache))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["imported"] == imported
    out = tmp_path / "export.json"
    proc = _cli("cache", "export", "--cache", str(cache), "--output", str(out))
    assert proc.returncode == 0 and json.loads(proc.stdout)["exported"] == imported
    assert len(json.loads(out.read_text())) == imported

    index = tmp_path / "index"
    proc = _cli("index", "build", "--cache-json", str(source), "--output", str(index))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["documents"] > facts["search_min_documents"] and (index / "corpus.jsonl").exists()

    reference = json.loads(source.read_text())
    query = facts["search_query"]
    # replay through the cache: exactly the recorded observation
    proc = _cli("tool", "search", "--query", query, "--backend", "replay", "--cache", str(cache))
    assert proc.returncode == 0 and proc.stdout == reference[query] + "\n"
    assert "cached=True" in proc.stderr
    # offline BM25 over the recorded snippets, no cache
    proc = _cli("tool", "search", "--query", query, "--backend", "local", "--index", str(index), "--topk", "3")
    assert proc.returncode == 0 and proc.stdout.startswith("Page 1: ") and proc.stdout.count("Page ") == 3

    proc = _cli("cache", "stats", "--cache", str(cache))
    stats = json.loads(proc.stdout)
    stored = sum(len(v.encode()) for v in reference.values())  # the release: 1.6 MB, a file of more than 1 MB
    assert stats["entries"] == imported and stats["size_bytes"] > stored // 2 and stats["hits"] >= 1
    assert 0 < stats["hit_rate"] <= 1


def test_cli_errors_are_messages(tmp_path):
    proc = _cli("cache", "import", str(tmp_path / "missing.json"), "--cache", str(tmp_path / "c.sqlite"))
    assert proc.returncode == 1 and proc.stderr.startswith("error:")


@pytest.mark.parametrize("argv", [["tool"], ["cache", "import"], ["nonsense"]])
def test_cli_usage_errors(argv):
    assert _cli(*argv).returncode == 2


def test_doctor_prints_the_measurement_and_flags_a_level_below_the_minimum(monkeypatch, capsys):
    """The doctor shows what the probe measured; a level below agentic_python_min_isolation's default is flagged with
    how to fix it, without failing the activation check. `rlimits-only` is forced (as on a machine without
    namespaces): the test compares with what that sandbox measures on this machine."""
    import argparse

    from llamafactory_agentic import cli
    from llamafactory_agentic.integration.patches import LLAMABOARD_PATCHES, PATCHES
    from llamafactory_agentic.tools.sandbox.isolation import measure_isolation

    monkeypatch.setattr(
        cli, "_probe_activation_in_subprocess", lambda: {"hook": True, "patches": [*PATCHES, *LLAMABOARD_PATCHES]}
    )
    monkeypatch.setenv("AGENTIC_PYTHON_ISOLATION", "rlimits-only")
    expected = measure_isolation("rlimits-only")
    assert cli.doctor(argparse.Namespace()) == 0
    out = capsys.readouterr().out
    assert f"python tool isolation: {expected.level} (rlimits-only," in out
    assert "measured inside the sandbox: " + expected.describe().split(": ", 1)[1] in out
    flagged = "[WARN] " + expected.level + " is below agentic_python_min_isolation's default (unprivileged)"
    assert (flagged in out) == (expected.level == "none")
    assert "result: ok" in out
