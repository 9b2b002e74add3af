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

"""The documentation the code cites exists: `docs/algorithms.md §N.M` citations, anchors and links all resolve."""

import re
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
ALGORITHMS = DOCS / "algorithms.md"
# Everything that may cite the documentation (the docs themselves are checked by the link tests below).
CITING_DIRS = ("llamafactory_agentic", "tests", "benchmarks", "evaluation", "recipes")
CITING_FILES = ("README.md", "data/README.md", "setup.py", "_llamafactory_agentic_hook.py")
CITING_SUFFIXES = {".py", ".yaml", ".yml", ".json", ".md", ".txt"}

# "docs/algorithms.md" followed by one or more section numbers: "§3.2", "§2, §6, §8", "§4.4 and §5.3", "§4.2-§4.3".
_CITATION = re.compile(r"docs/algorithms\.md((?:\s*(?:,|and|-|;)?\s*§\d+(?:\.\d+)?)+)")
_SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
# Citations of files users do not have (written split so that this file does not match itself).
_EXTERNAL = re.compile("|".join(["ALGORITHMS" + r"\.md", "shared/" + "specs", "INTERFACES" + r"\.md", "ARCHITECTURE" + r"\.md",
                                 r"\bspec" + r" sections? \d", r"\bspec" + r" §", r"\bspec" + r" \d", r"section \d+(?:\.\d+)? of the " + "spec"]))  # fmt: skip


def _citing_files() -> list[Path]:
    files = [ROOT / name for name in CITING_FILES if (ROOT / name).is_file()]
    for folder in CITING_DIRS:
        files.extend(
            path
            for path in sorted((ROOT / folder).rglob("*"))
            if path.is_file() and path.suffix in CITING_SUFFIXES and "__pycache__" not in path.parts
        )
    return files


def github_anchor(heading: str) -> str:
    r"""The anchor GitHub gives a Markdown heading: lower-case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(path: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^#{1,6} (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)]


def _numbered_sections(path: Path) -> set[str]:
    numbers = set()
    for heading in _headings(path):
        match = re.match(r"(\d+(?:\.\d+)?)\.? ", heading)
        if match:
            numbers.add(match.group(1))
    return numbers


def test_every_citation_names_an_existing_section():
    sections = _numbered_sections(ALGORITHMS)
    assert {"1", "3.2", "5.5", "12"} <= sections  # the spec's numbering is kept
    cited, missing = 0, []
    for path in _citing_files():
        text = path.read_text(encoding="utf-8", errors="replace")
        for match in _CITATION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            for number in _SECTION.findall(match.group(1)):
                cited += 1
                if number not in sections:
                    missing.append(f"{path.relative_to(ROOT)}:{line}: §{number}")
    assert cited > 100, f"only {cited} citations found; is the citation pattern still `docs/algorithms.md §N.M`?"
    assert not missing, "citations of sections docs/algorithms.md does not have:\n" + "\n".join(missing)


def test_no_citation_of_files_outside_the_repository():
    this_file = Path(__file__).resolve()
    found = []
    for path in _citing_files():
        if path.resolve() == this_file:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _EXTERNAL.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "cite docs/ instead of files users do not have:\n" + "\n".join(found)


def test_contents_table_lists_every_section_anchor():
    text = ALGORITHMS.read_text(encoding="utf-8")
    anchors = [github_anchor(h) for h in _headings(ALGORITHMS) if re.match(r"\d", h)]
    listed = re.findall(r"^\| [\d.]+ \| \[`#([^`]+)`\]\(#([^)]+)\) \|$", text, re.MULTILINE)
    assert [shown for shown, _ in listed] == anchors
    assert all(shown == target for shown, target in listed)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_links_between_doc_pages_resolve(page):
    source = DOCS / page
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", source.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (source.parent / file_part).resolve() if file_part else source
        if not resolved.exists():
            broken.append(target)
        elif anchor and anchor not in {github_anchor(h) for h in _headings(resolved)}:
            broken.append(target)
    assert not broken, f"{page}: broken links {broken}"
