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

"""Tool protocol: call and result types, the `BaseTool` class and bounded output handling.

A tool turns the body of a model-written `<tag>…</tag>` span into observation text. `BaseTool.execute` never raises:
parse errors, backend exceptions and exhausted retries all become `ToolResult`s whose text the model can read
(docs/tools.md; docs/algorithms.md §7).
"""

import codecs
import re
import time
from dataclasses import dataclass, field
from typing import Any

import tenacity

from ..common.log import get_logger
from ..data.tags import reserved_tag_error
from ..hparams import PYTHON_MAX_OUTPUT_CHARS, TOOL_RETRIES
from ..validation import check_number  # noqa: F401  (re-exported: the tools validate their settings with it)


logger = get_logger(__name__)

STATUS_OK = "ok"
STATUS_EMPTY = "empty"
STATUS_ERROR = "error"
STATUS_TIMEOUT = "timeout"
STATUS_LIMIT = "limit"
STATUS_UNKNOWN_TOOL = "unknown_tool"
STATUS_CACHE_MISS = "cache_miss"
NO_SEARCH_RESULTS_TEXT = "No search results found."
ALL_STATUSES = (
    STATUS_OK,
    STATUS_EMPTY,
    STATUS_ERROR,
    STATUS_TIMEOUT,
    STATUS_LIMIT,
    STATUS_UNKNOWN_TOOL,
    STATUS_CACHE_MISS,
)


@dataclass
class ToolCall:
    r"""One tool call written by the model.

    Attributes:
        tool: tag name that triggered it (`python`, `search` or a user-registered tool's tag).
        content: call body between `<tag>` and `</tag>`, whitespace-stripped (may be "").
        trajectory_id: id of the trajectory that made the call (used for per-trajectory call limits).
    """

    tool: str
    content: str
    trajectory_id: str | None = None


@dataclass
class ToolResult:
    r"""Observation of one call.

    Attributes:
        text: observation text WITHOUT the `" <result>\n...\n</result>"` wrapping (the rollout wraps it).
        status: one of "ok", "empty", "error", "timeout", "limit", "unknown_tool", "cache_miss".
        latency_s: wall-clock seconds the call took (cache lookup time for a hit).
        cached: True when the text came from the persistent cache.
    """

    text: str
    status: str
    latency_s: float
    cached: bool = False


@dataclass
class ToolOutput:
    r"""What a tool's `run` returns for one attempt: text plus a status (see `ToolResult`)."""

    text: str
    status: str = STATUS_OK
    meta: dict[str, Any] = field(default_factory=dict)


class ToolError(Exception):
    r"""A failure that is not worth retrying (bad arguments, HTTP 4xx other than 429, missing index...)."""


class TransientToolError(ToolError):
    r"""A failure that may succeed on another attempt (timeouts, HTTP 429/5xx, malformed responses)."""


def error_text(tool_name: str, message: str) -> str:
    r"""Observation for a call that failed after all attempts (RUC-NLPIR/ARPO search_tool.py wording)."""
    return f"Error: Tool({tool_name}) execution failed with message: {message}"


def empty_output_text(tool_name: str) -> str:
    r"""Observation for a successful call without output, e.g. `Tool(python) returned empty output.`."""
    return f"Tool({tool_name}) returned empty output."


def redact(text: str, secrets: "list[str] | tuple[str, ...]") -> str:
    r"""Replace every non-trivial secret value (API keys from `${VAR}`) in `text` with `***`."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


class BaseTool:
    r"""Base class of every tool.

    Subclasses set `name` and `default_tag`, and implement `run(args) -> ToolOutput` (may raise; `TransientToolError`
    and any other exception except `ToolError` are retried). `parse(content)` turns the call body into arguments and
    `cache_key(args)` into the normalised string the cache is keyed by.

    Args:
        tag: tag that triggers the tool (defaults to `default_tag`).
        timeout_s: wall-clock budget per call in seconds, all attempts included (the executor stops waiting after
            `timeout_s` plus a small grace period).
        retries: attempts per call (>= 1) on exception or, when `retry_on_empty`, on an empty result (default: the
            `arpo` preset's `agentic_tool_retries`, `hparams.TOOL_RETRIES`).
        call_limit: calls allowed per trajectory for this tool (None: unlimited; the rollout has its own limit).
        dedup: share one execution between identical calls in flight at the same time.
        backoff_s: initial wait between attempts (exponential with jitter, capped at 8 s).
    """

    name: str = "tool"
    default_tag: str = "tool"
    retry_on_empty: bool = False
    default_dedup: bool = True

    def __init__(
        self,
        tag: str | None = None,
        timeout_s: float = 60.0,
        retries: int = TOOL_RETRIES,
        call_limit: int | None = None,
        dedup: bool | None = None,
        backoff_s: float = 0.5,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring).

        Raises:
            ValueError: a non-positive or non-numeric `timeout_s`, `retries` < 1, a negative `call_limit` or
                `backoff_s`, a `tag` that is not a word or is reserved (`think`, `answer`, `result`), or a `dedup` that is not a boolean.
        """
        self.tag = tag or self.default_tag
        if not isinstance(self.tag, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", self.tag):
            raise ValueError(f"`tag` must be a word such as `search` (letters, digits, _ or -), got {self.tag!r}")
        reserved = reserved_tag_error(self.tag, f"`tag: {self.tag}_tool` in the tool's entry")
        if reserved is not None:
            raise ValueError(reserved)
        self.timeout_s = check_number("timeout_s", timeout_s)
        self.retries = check_number("retries", retries, integer=True, minimum=1, inclusive=True)
        self.call_limit = check_number("call_limit", call_limit, integer=True, inclusive=True, allow_none=True)
        if dedup is not None and not isinstance(dedup, bool):
            raise ValueError(f"`dedup` must be true or false, got {dedup!r}")
        self.dedup = self.default_dedup if dedup is None else dedup
        self.backoff_s = check_number("backoff_s", backoff_s, inclusive=True)
        self._secrets: list[str] = []

    # ------------------------------------------------------------------ to override
    def parse(self, content: str) -> Any:
        r"""Turn the call body into arguments. Raises `ToolError` for an unusable body."""
        return content.strip()

    def cache_key(self, args: Any) -> str:
        r"""Normalised string identifying `args` (the cache key and the in-flight dedup key)."""
        return str(args)

    def run(self, args: Any) -> ToolOutput:
        r"""One attempt. May raise; must not block much longer than `timeout_s`."""
        raise NotImplementedError

    def backend_name(self) -> str:
        r"""Name of the backend that produced results (stored in the cache metadata)."""
        return self.name

    def limit_observation(self, text: str) -> str:
        r"""`text` (an observation that did not come from `run`: a cached or replayed one) within the tool's limits.

        The executor applies it to every cache hit, so a stored entry never gives the model more than a live call
        would (e.g. the search tool keeps `topk` pages of `snippet_chars` characters). The default keeps `text`;
        tools with output limits override it.
        """
        return text

    def close(self) -> None:
        r"""Release resources (HTTP clients, indexes)."""

    # ------------------------------------------------------------------ provided
    def add_secrets(self, *values: str) -> None:
        r"""Remember secret values so that they are redacted from every observation and log line."""
        self._secrets.extend(v for v in values if v)

    def execute(self, content: str) -> ToolResult:
        r"""Parse and run one call with retries; never raises.

        Returns:
            A `ToolResult` with status "ok", "empty", "error" or "timeout".
        """
        start = time.perf_counter()
        try:
            args = self.parse(content)
        except Exception as exc:  # noqa: BLE001 - any parse failure becomes an observation
            return ToolResult(self._safe(error_text(self.name, str(exc))), STATUS_ERROR, time.perf_counter() - start)
        return self.execute_args(args, start=start)

    def execute_args(self, args: Any, start: float | None = None) -> ToolResult:
        r"""Run already-parsed arguments with retries (tenacity); never raises."""
        start = time.perf_counter() if start is None else start
        deadline = start + self.timeout_s

        def _retry_result(output: ToolOutput) -> bool:
            return self.retry_on_empty and output.status == STATUS_EMPTY

        def _retry_exc(exc: BaseException) -> bool:
            return isinstance(exc, Exception) and not (
                isinstance(exc, ToolError) and not isinstance(exc, TransientToolError)
            )

        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.retries) | tenacity.stop_before_delay(max(self.timeout_s, 0.0)),
            wait=tenacity.wait_exponential(multiplier=self.backoff_s, max=8.0)
            + tenacity.wait_random(0, self.backoff_s),
            retry=tenacity.retry_if_exception(_retry_exc) | tenacity.retry_if_result(_retry_result),
            retry_error_callback=lambda state: state.outcome.result(),
            before_sleep=lambda state: logger.debug("retrying %s (attempt %d)", self.name, state.attempt_number),
        )
        try:
            output = retrying(self.run, args)
        except Exception as exc:  # noqa: BLE001 - the last attempt's exception becomes an observation
            message = str(exc) or type(exc).__name__
            status = STATUS_TIMEOUT if time.perf_counter() > deadline else STATUS_ERROR
            return ToolResult(self._safe(error_text(self.name, message)), status, time.perf_counter() - start)
        return ToolResult(self._safe(output.text), output.status, time.perf_counter() - start)

    def _safe(self, text: str) -> str:
        return redact(text, self._secrets) if self._secrets else text

    def __repr__(self) -> str:
        r"""Standard `__repr__`."""
        return f"{type(self).__name__}(tag={self.tag!r}, timeout_s={self.timeout_s}, retries={self.retries})"


class BoundedText:
    r"""Incrementally decoded, stripped and capped text stream (never holds more than ~`max_chars` characters).

    Keeps the first `max_chars // 2` and the last `max_chars - max_chars // 2` characters of the stripped stream and
    counts the rest, so 100 MB of child output costs O(max_chars) memory. `value()` returns the stream itself when it
    fits, else `head + "\n[… N characters omitted …]\n" + tail` (docs/algorithms.md §7.1: 2000 + 2000 characters).

    Args:
        max_chars: output cap in characters (> 0; default `agentic_python_max_output_chars`'s).
        encoding: byte encoding of `feed_bytes` input (invalid bytes become U+FFFD).
    """

    def __init__(self, max_chars: int = PYTHON_MAX_OUTPUT_CHARS, encoding: str = "utf-8") -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        self.max_chars = max(2, int(max_chars))
        self.head_cap = self.max_chars // 2
        self.tail_cap = self.max_chars - self.head_cap
        self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
        self._started = False  # leading whitespace skipped until the first non-space character
        self._head = ""
        self._tail = ""  # last characters of the committed stream (after the head)
        self._count = 0  # committed characters (leading whitespace excluded, pending whitespace excluded)
        self._pending_head = ""  # trailing whitespace run, not yet committed: first part ...
        self._pending_tail = ""  # ... and last part
        self._pending_count = 0

    def feed_bytes(self, data: bytes) -> None:
        r"""Decode and add a chunk of raw bytes."""
        self.feed(self._decoder.decode(data))

    def feed(self, text: str) -> None:
        r"""Add a chunk of text."""
        if not text:
            return
        if not self._started:
            text = text.lstrip()
            if not text:
                return
            self._started = True
        body = text.rstrip()
        trailing = text[len(body) :]
        if body:
            if self._pending_count:
                if self._pending_count == len(self._pending_head):
                    self._commit(self._pending_head, "", self._pending_count)
                else:
                    self._commit(self._pending_head, self._pending_tail, self._pending_count)
                self._pending_head = self._pending_tail = ""
                self._pending_count = 0
            self._commit(body, "", len(body))
        if trailing:
            self._add_pending(trailing)

    def _add_pending(self, ws: str) -> None:
        room = self.max_chars - len(self._pending_head)
        if room > 0:
            self._pending_head += ws[:room]
        self._pending_tail = (self._pending_tail + ws)[-self.max_chars :]
        self._pending_count += len(ws)

    def _commit(self, first: str, last: str, count: int) -> None:
        # `first` + (count - len(first) - len(last) unknown characters) + `last` is the text to append; when
        # `last` is empty, `first` is the whole text.
        last_full = first if not last else None
        room = self.head_cap - len(self._head)
        if room > 0:
            taken = first[:room]
            self._head += taken
            count_after_head = count - len(taken)
            if last_full is not None:
                rest = last_full[len(taken) :]
            else:
                rest = last  # middle is unknown but never needed: the head is filled from `first`
        else:
            count_after_head = count
            rest = last_full if last_full is not None else last
        if count_after_head <= 0:
            return
        self._tail = (self._tail + rest)[-self.tail_cap :]
        self._count += count_after_head

    def total_chars(self) -> int:
        r"""Characters of the stripped stream."""
        self._flush_decoder()
        return len(self._head) + self._count

    def _flush_decoder(self) -> None:
        rest = self._decoder.decode(b"", final=True)
        if rest:
            self.feed(rest)

    def value(self) -> str:
        r"""The stripped stream, truncated around an omission line when longer than `max_chars`."""
        self._flush_decoder()
        if self._count == 0:
            return self._head
        if self._count <= self.tail_cap:
            return self._head + self._tail
        omitted = self._count - self.tail_cap
        return f"{self._head}\n[… {omitted} characters omitted …]\n{self._tail}"


def canonical_json(value: Any) -> str:
    r"""Compact JSON with sorted keys: equal argument objects give equal strings (the MCP and HTTP tools' cache keys)."""
    import json

    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def truncate_middle(text: str, max_chars: int) -> str:
    r"""Strip `text` and cap it like `BoundedText` (first half + omission line + last half)."""
    bounded = BoundedText(max_chars)
    bounded.feed(text)
    return bounded.value()
