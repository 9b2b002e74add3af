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

r"""URL blocklist of the web search backend: results from benchmark pages never reach the model (docs/plan.md §3).

`Blocklist`: URL patterns (`host/path-prefix`, `*` as a wildcard; a bare host blocks the host and its subdomains).
`DEFAULT_BLOCKLIST` holds the pages that publish the papers' benchmarks and their answer keys (the Hugging Face dataset
pages and repositories of GAIA, HLE, SimpleQA, xbench, WebWalker, ...). The web search backend drops a result whose
link matches before its snippet reaches the model (`tools/search.py`, `blocklist` parameter). The answer-leak check of
the same guard is in `rewards/contamination.py`.
"""

import fnmatch
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit


DEFAULT_BLOCKLIST: tuple[str, ...] = (
    # GAIA (arXiv 2311.12983): the dataset and its answer-bearing leaderboard spaces
    "huggingface.co/datasets/gaia-benchmark",
    "huggingface.co/spaces/gaia-benchmark",
    # Humanity's Last Exam
    "huggingface.co/datasets/cais/hle",
    "lastexam.ai",
    "github.com/centerforaisafety/hle",
    # SimpleQA (and its copies on the hub)
    "huggingface.co/datasets/basicv8vc/SimpleQA",
    "huggingface.co/datasets/*/simpleqa*",
    "huggingface.co/datasets/*/SimpleQA*",
    "openaipublic.blob.core.windows.net/simple-evals",
    "github.com/openai/simple-evals",
    # xbench-DeepSearch
    "huggingface.co/datasets/xbench",
    "xbench.org",
    "github.com/xbench-ai",
    # WebWalkerQA
    "huggingface.co/datasets/callanwu/WebWalkerQA",
    "github.com/Alibaba-NLP/WebWalker",
    # BrowseComp and the ARPO/AEPO evaluation files themselves
    "huggingface.co/datasets/*/browsecomp*",
    "github.com/RUC-NLPIR/ARPO/*/evaluation/data",
    "huggingface.co/datasets/dongguanting/ARPO-*",
)


class Blocklist:
    r"""URL patterns; `blocks(url)` says whether a URL matches one.

    A pattern is `host[/path]`: the host matches itself and its subdomains (`xbench.org` blocks `www.xbench.org`),
    the path matches as a prefix, `*` matches any characters (within and across path segments), letters match in any
    case. A URL without a scheme is read as `https://`.

    Args:
        patterns: The patterns; `None` or `"default"` gives `DEFAULT_BLOCKLIST`, `"none"` or `[]` blocks nothing,
            a list that contains `"default"` adds the defaults to its other patterns.

    Raises:
        ValueError: a pattern that is not a string or is empty.
    """

    def __init__(self, patterns: Iterable[str] | str | None = None) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if patterns is None or patterns == "default":
            patterns = list(DEFAULT_BLOCKLIST)
        elif patterns == "none":
            patterns = []
        elif isinstance(patterns, str):
            patterns = [patterns]
        expanded: list[str] = []
        for p in patterns:
            if not isinstance(p, str) or not p.strip():
                raise ValueError(f"blocklist pattern {p!r}: expected a non-empty `host[/path]` string")
            expanded += list(DEFAULT_BLOCKLIST) if p == "default" else [p.strip()]
        self.patterns = tuple(dict.fromkeys(expanded))
        self._compiled = [self._compile(p) for p in self.patterns]

    @staticmethod
    def _compile(pattern: str) -> tuple[re.Pattern, re.Pattern]:
        body = pattern.split("://", 1)[-1]
        host, _, path = body.partition("/")
        host_re = re.compile(r"(?:.*\.)?" + fnmatch.translate(host.lower()).removesuffix(r"\Z"), re.IGNORECASE)
        path_re = re.compile("/" + fnmatch.translate(path).removesuffix(r"\Z"), re.IGNORECASE)
        return host_re, path_re

    def blocks(self, url: str | None) -> bool:
        r"""Whether `url` matches a pattern (False for an empty or missing URL)."""
        if not url:
            return False
        url = url.strip()
        parts = urlsplit(url if "://" in url else "https://" + url)
        host, path = (parts.hostname or "").lower(), parts.path or "/"
        return any(h.fullmatch(host) and p.match(path) for h, p in self._compiled)

    def filter(self, results: Sequence[Any], url_keys: Sequence[str] = ("link", "url")) -> tuple[list[Any], int]:
        r"""`(kept results, number dropped)`: drops each dict result whose first present `url_keys` value is blocked."""
        kept = []
        for result in results:
            url = next((result.get(k) for k in url_keys if isinstance(result, dict) and result.get(k)), None)
            if not self.blocks(url if isinstance(url, str) else None):
                kept.append(result)
        return kept, len(results) - len(kept)
