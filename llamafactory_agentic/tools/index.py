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

"""Local search corpus and BM25 index (the offline `local` search backend).

`build_corpus_from_cache_json` splits every recorded result of the reference's `search_cache.json` into its
`Page i:` snippets, removes empty and duplicate snippets and writes `corpus.jsonl` (`{"id", "text", "query"}` per
line); `BM25Index` builds a `bm25s` index once and persists it in `<corpus dir>/bm25s/` next to the corpus (rebuilt
when the corpus file is newer), so the offline default answers real queries with real text.
"""

import json
import os
import re
import threading
from pathlib import Path

from ..common.log import get_logger
from .base import NO_SEARCH_RESULTS_TEXT, ToolError


logger = get_logger(__name__)

CORPUS_FILE = "corpus.jsonl"
INDEX_DIR = "bm25s"
_PAGE_SPLIT = re.compile(r"(?:^|\n)Page \d+: ")


def _import_bm25s():
    r"""Import `bm25s` without letting JAX take the GPU.

    When JAX is installed, `import bm25s` imports `jax.lax` and runs one top-k at import time, and JAX then
    preallocates 75% of the first GPU's memory in the trainer's process (on an H200, `Failed to allocate device memory
    of 104.85GiB`: the training runs beside it ran out of memory). BM25's top-k over one score vector needs no GPU, so
    JAX is pointed at the CPU and told not to preallocate, unless the user set these variables; retrieval also asks
    bm25s for its numpy selection explicitly (`backend_selection="numpy"` in `BM25Index.search`).
    """
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import bm25s

    return bm25s


def split_pages(result: str) -> list[str]:
    r"""Snippets of one formatted result `Page 1: …\nPage 2: …` (stripped, empty ones dropped)."""
    if not result or result.strip() == NO_SEARCH_RESULTS_TEXT:
        return []
    parts = _PAGE_SPLIT.split(result)
    return [p.strip() for p in parts if p.strip()]


def build_corpus_from_cache_json(cache_json: str | os.PathLike, output_dir: str | os.PathLike) -> dict[str, int]:
    r"""Write `<output_dir>/corpus.jsonl` from a reference cache `{query: "Page 1: …"}` and build its BM25 index.

    Returns:
        `{"queries", "snippets", "duplicates", "documents"}` counts.

    Raises:
        ValueError: the file is not a JSON object.
    """
    with open(cache_json, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"{cache_json}: expected a JSON object {{query: result}}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    snippets = duplicates = 0
    tmp = out / (CORPUS_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for query, result in data.items():
            for snippet in split_pages(result if isinstance(result, str) else ""):
                snippets += 1
                if snippet in seen:
                    duplicates += 1
                    continue
                seen.add(snippet)
                f.write(json.dumps({"id": len(seen) - 1, "text": snippet, "query": query}, ensure_ascii=False) + "\n")
    os.replace(tmp, out / CORPUS_FILE)
    BM25Index(out).ensure_built(force=True)
    counts = {"queries": len(data), "snippets": snippets, "duplicates": duplicates, "documents": len(seen)}
    logger.info("[agentic-tools] built local search corpus %s: %s", out, counts)
    return counts


class BM25Index:
    r"""BM25 over a JSONL corpus with `bm25s` (English stop words, lower-cased word tokens).

    Args:
        location: a folder holding `corpus.jsonl`, or the path of a `.jsonl` corpus (its index then lives in
            `<file stem>.bm25s/` next to it). Each line is an object with a `text` (or `contents`) field.
    """

    def __init__(self, location: str | os.PathLike) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        location = Path(location)
        if location.suffix == ".jsonl":
            self.corpus_path = location
            self.index_dir = location.with_suffix(".bm25s")
        else:
            self.corpus_path = location / CORPUS_FILE
            self.index_dir = location / INDEX_DIR
        self._retriever = None
        self._texts: list[str] = []
        self._rows: list[dict] = []
        self._lock = threading.Lock()

    def _load_rows(self) -> list[dict]:
        with open(self.corpus_path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    def _load_texts(self) -> list[str]:
        return [str(row.get("text") or row.get("contents") or "") for row in self._load_rows()]

    def _fresh(self) -> bool:
        marker = self.index_dir / "params.index.json"
        return marker.exists() and marker.stat().st_mtime >= self.corpus_path.stat().st_mtime

    def ensure_built(self, force: bool = False) -> None:
        r"""Build and persist the index unless an up-to-date one exists (a file lock serialises builders).

        Raises:
            ToolError: the corpus file does not exist.
        """
        from filelock import FileLock

        bm25s = _import_bm25s()

        if not self.corpus_path.exists():
            raise ToolError(
                f"local search corpus {self.corpus_path} not found; build it with "
                "`llamafactory-agentic index build --cache-json search_cache.json --output DIR`"
            )
        with FileLock(str(self.index_dir) + ".lock"):
            if not force and self._fresh():
                return
            texts = self._load_texts()
            retriever = bm25s.BM25()
            tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
            retriever.index(tokens, show_progress=False)
            tmp_dir = Path(str(self.index_dir) + f".tmp{os.getpid()}")
            retriever.save(str(tmp_dir), show_progress=False)
            if self.index_dir.exists():
                import shutil

                shutil.rmtree(self.index_dir)
            os.replace(tmp_dir, self.index_dir)
            logger.info("[agentic-tools] BM25 index of %d documents saved to %s", len(texts), self.index_dir)

    def _load(self) -> None:
        bm25s = _import_bm25s()
        self.ensure_built()
        self._retriever = bm25s.BM25.load(str(self.index_dir), show_progress=False, verbosity=0)
        self._rows = self._load_rows()
        self._texts = [str(row.get("text") or row.get("contents") or "") for row in self._rows]

    def search(self, query: str, topk: int) -> list[str]:
        r"""Texts of the `topk` best-scoring documents with a positive score (best first)."""
        return [self._texts[i] for i in self._best(query, topk)]

    def search_results(self, query: str, topk: int) -> list[dict]:
        r"""The corpus rows (`text`, and `url`, `title` where the corpus has them) of `search`'s documents."""
        return [dict(self._rows[i]) for i in self._best(query, topk)]

    def _best(self, query: str, topk: int) -> list[int]:
        bm25s = _import_bm25s()

        with self._lock:
            if self._retriever is None:
                self._load()
            if not self._texts:
                return []
            tokens = bm25s.tokenize([query], stopwords="en", show_progress=False, return_ids=False)
            if not tokens or not tokens[0]:
                return []
            query_tokens = [[t for t in tokens[0] if t in self._retriever.vocab_dict]]
            if not query_tokens[0]:
                return []
            k = min(topk, len(self._texts))
            docs, scores = self._retriever.retrieve(
                query_tokens, k=k, show_progress=False, n_threads=0, backend_selection="numpy"
            )
        return [int(d) for d, s in zip(docs[0], scores[0]) if s > 0]
