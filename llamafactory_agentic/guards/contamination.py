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

r"""Search contamination guard: a URL blocklist for web results and the answer-leak check (docs/plan.md §3).

* `Blocklist`: URL patterns (`host/path-prefix`, `*` as a wildcard; a bare host blocks the host and its subdomains).
  `DEFAULT_BLOCKLIST` holds the pages that publish the papers' benchmarks and their answer keys (the Hugging Face
  dataset pages and repositories of GAIA, HLE, SimpleQA, xbench, WebWalker, ...). The web search backend drops a result
  whose link matches before its snippet reaches the model (`tools/search.py`, `blocklist` parameter).
* `answer_leaks(observation, ground_truth)`: whether an observation holds a reference answer, both normalised as the
  reward normalises answers (`rewards/deep_research.py:normalize_answer`), matched on whole words.
  `tools/answer_leak_rate` is the share of trajectories with at least one such observation (logged by the trainer for
  training and validation rollouts).
* `guard_observation(text, ground_truth, mode)`: `log` keeps the text, `mask` replaces the answer by `[masked]`,
  `drop` replaces the whole observation by a notice.
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


def _references(ground_truth: Any) -> list[str]:
    from ..rewards.deep_research import normalize_answer, normalize_ground_truths

    return [n for n in (normalize_answer(str(g)) for g in normalize_ground_truths(ground_truth)) if n]


def answer_leaks(observation: str, ground_truth: Any) -> bool:
    r"""Whether `observation` holds one of the reference answers (normalised as the reward does, whole words)."""
    from ..rewards.deep_research import normalize_answer

    text = f" {normalize_answer(observation or '')} "
    return any(f" {ref} " in text for ref in _references(ground_truth))


def guard_observation(text: str, ground_truth: Any, mode: str = "log") -> tuple[str, bool]:
    r"""`(text to show the model, leaked)` for one observation under `mode` (`log`, `mask` or `drop`).

    `mask` replaces each occurrence of a reference answer (case-insensitive, as written in the ground truth, and its
    normalised form) by `[masked]`; `drop` replaces the whole text by a notice.

    Raises:
        ValueError: unknown `mode`.
    """
    if mode not in ("log", "mask", "drop"):
        raise ValueError(f"contamination mode {mode!r}: expected log, mask or drop")
    leaked = answer_leaks(text, ground_truth)
    if not leaked or mode == "log":
        return text, leaked
    if mode == "drop":
        return "[result withheld: it contained the answer to this question]", True
    from ..rewards.deep_research import normalize_ground_truths

    out = text
    for ref in sorted({str(g) for g in normalize_ground_truths(ground_truth)} | set(_references(ground_truth)), key=len,
                      reverse=True):  # fmt: skip
        if ref.strip():
            out = re.sub(r"(?<!\w)" + re.escape(ref.strip()) + r"(?!\w)", "[masked]", out, flags=re.IGNORECASE)
    return out, True


def observation_texts(tokenizer: Any, response_ids: Sequence[int], loss_mask: Sequence[int]) -> list[str]:
    r"""The decoded observations of a trajectory: each maximal run of loss-mask-0 tokens of the response."""
    texts, run = [], []
    for token, m in zip(response_ids, loss_mask):
        if m == 0:
            run.append(int(token))
        elif run:
            texts.append(tokenizer.decode(run, skip_special_tokens=True))
            run = []
    if run:
        texts.append(tokenizer.decode(run, skip_special_tokens=True))
    return texts


def answer_leak_rate(observations: Sequence[Sequence[str]], ground_truths: Sequence[Any]) -> float:
    r"""Share of trajectories (one list of observation texts each) with an observation that holds its answer."""
    if not observations:
        return 0.0
    hits = sum(any(answer_leaks(o, gt) for o in obs) for obs, gt in zip(observations, ground_truths))
    return hits / len(observations)
