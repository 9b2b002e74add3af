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

r"""Generic HTTP tool: `<tag>body</tag>` is POSTed as JSON to a configured URL; the answer is the observation.

Request (docs/tools.md "HTTP tools"): `POST url` with the JSON object
`{"tool": <name>, "content": <call body>, "arguments": <the body parsed as a JSON object, else null>}` and the
configured headers. Answer: a JSON object whose `observation` (or `result`, `output`, `text`) is the observation text,
optionally with `"status": "ok" | "empty" | "error"` or an `error` message (an "error" observation); a JSON string or
a plain-text body is the observation itself; other JSON is shown as JSON. The text is cut to `max_output_chars`.

Outbound limits (`common/outbound.py`, docs/tools.md "Outbound limits"): the whole call, every attempt, connection,
headers and body included, ends within `timeout_s` (a server sending one byte a second is cut off there and the
executor's worker is free again); the body is streamed and reading stops at `max_response_bytes` (default
`HTTP_MAX_RESPONSE_BYTES`, 1 MiB: a text answer keeps its first bytes and says it was cut, a JSON answer that long is
an error); a redirect is followed only within the URL's origin (scheme, host and port): one to another origin is an
error observation, so the call's body and its `${VAR}` headers never reach another server.

Failures follow the search backends (`search.HTTPBackend`): timeouts, connection errors, HTTP 429 and 5xx and a
malformed JSON answer are transient (retried with exponential backoff while the call's `timeout_s` allows), other
4xx answers are final; either way the call ends as an "error" or "timeout" observation, never an exception. Results
are cached by the executor like search results (`cache.tools` names the tool; the key is the canonical JSON of the
arguments, or the whitespace-collapsed body when it is not a JSON object).
"""

import json
from typing import Any

from ..common import outbound
from ..common.log import get_logger
from ..hparams import PYTHON_MAX_OUTPUT_CHARS
from .base import (
    STATUS_EMPTY,
    STATUS_ERROR,
    STATUS_OK,
    BaseTool,
    ToolError,
    ToolOutput,
    TransientToolError,
    canonical_json,
    check_number,
    empty_output_text,
    error_text,
    truncate_middle,
)
from .registry import ToolConfigError, describe_value, register_tool


logger = get_logger(__name__)

OBSERVATION_KEYS = ("observation", "result", "output", "text")
HTTP_TOOL_KEYS = ("name", "url", "tag", "headers", "timeout", "retries", "call_limit", "dedup", "max_output_chars",
                  "max_response_bytes")  # fmt: skip
HTTP_MAX_RESPONSE_BYTES = 1 << 20  # `max_response_bytes` of an HTTP tool: most answer bytes read per call


@register_tool("http")
class HTTPTool(BaseTool):
    r"""A tool served over HTTP (see the module docstring for the request and the answer).

    Args:
        url: the endpoint the calls are POSTed to (`http://` or `https://`).
        tool_name: the tool's name (metrics, cache, the request's `tool` field; default the tag).
        headers: HTTP headers sent with every call (values from `${VAR}` are secrets: redacted, never logged).
        max_output_chars: observation cap in characters (head and tail kept; default
            `agentic_python_max_output_chars`'s).
        max_response_bytes: most bytes of an answer's body read (default `HTTP_MAX_RESPONSE_BYTES`, 1 MiB).
        **kwargs: `BaseTool` arguments (tag, timeout_s, retries, call_limit, dedup, backoff_s); `timeout_s` bounds
            the whole call, all attempts included (each request's deadline is what is left of it).

    Raises:
        ValueError: a URL that is not http(s), headers that are not a mapping, a bad `max_output_chars` or
            `max_response_bytes`.
    """

    name = "http"
    default_tag = "http"

    def __init__(
        self,
        url: str,
        tool_name: str | None = None,
        headers: dict[str, str] | None = None,
        max_output_chars: int = PYTHON_MAX_OUTPUT_CHARS,
        max_response_bytes: int = HTTP_MAX_RESPONSE_BYTES,
        **kwargs: Any,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ValueError(f"`url` of an HTTP tool must start with http:// or https://, got {describe_value(url)}")
        if headers is not None and not isinstance(headers, dict):
            raise ValueError(
                f"`headers` of an HTTP tool must be a mapping of names to strings, got {describe_value(headers)}"
            )
        if tool_name is not None and kwargs.get("tag") is None:
            kwargs["tag"] = tool_name
        super().__init__(**kwargs)
        self.name = str(tool_name or self.tag)
        self.url = url
        self.headers = {str(k): str(v) for k, v in (headers or {}).items()}
        self.max_output_chars = check_number("max_output_chars", max_output_chars, integer=True, minimum=2,
                                             inclusive=True)  # fmt: skip
        self.max_response_bytes = check_number("max_response_bytes", max_response_bytes, integer=True, minimum=1,
                                               inclusive=True)  # fmt: skip
        self.add_secrets(*self.headers.values())
        self._client = outbound.outbound_client(headers=self.headers)

    def parse(self, content: str) -> tuple[str, dict[str, Any] | None]:
        r"""`(body, arguments)`: the stripped body and, when it is a JSON object, that object (else None)."""
        body = content.strip()
        arguments = None
        if body.startswith("{"):
            try:
                value = json.loads(body)
            except json.JSONDecodeError:
                value = None
            arguments = value if isinstance(value, dict) else None
        return body, arguments

    def cache_key(self, args: tuple[str, dict[str, Any] | None]) -> str:
        r"""Canonical JSON of the arguments object, else the body with whitespace runs collapsed."""
        body, arguments = args
        return canonical_json(arguments) if arguments is not None else " ".join(body.split())

    def backend_name(self) -> str:
        r"""`http:<url>` (stored in the cache metadata)."""
        return f"http:{self.url}"

    def limit_observation(self, text: str) -> str:
        r"""`text` cut to `max_output_chars` (head and tail kept), as a live result is."""
        return truncate_middle(text, self.max_output_chars) if len(text) > self.max_output_chars else text

    def run(self, args: tuple[str, dict[str, Any] | None]) -> ToolOutput:
        r"""POST the call and turn the answer into an observation.

        Raises:
            TransientToolError: timeout (the call's `timeout_s` spent), connection error, HTTP 429/5xx, a JSON
                content type with a malformed body.
            ToolError: another HTTP 4xx answer (its first 200 characters in the message), a redirect to another
                origin, a JSON answer longer than `max_response_bytes`.
        """
        import httpx

        body, arguments = args
        left = self.time_left_s()
        if left <= 0:
            raise TransientToolError(f"no answer from {self.url} within {self.timeout_s:g} seconds")
        try:
            response = outbound.fetch(
                self._client, "POST", self.url, json={"tool": self.name, "content": body, "arguments": arguments},
                deadline_s=left, max_bytes=self.max_response_bytes, redirects="same_origin", truncate=True,
            )  # fmt: skip
        except outbound.RedirectRefused as exc:
            raise ToolError(f"{exc} (an HTTP tool follows redirects only within its URL's origin)") from exc
        except httpx.TimeoutException as exc:
            raise TransientToolError(f"no answer from {self.url} within {self.timeout_s:g} seconds") from exc
        except httpx.HTTPError as exc:
            raise TransientToolError(f"request to {self.url} failed: {type(exc).__name__}: {exc}") from exc
        snippet = " ".join(response.content[:200].decode("utf-8", errors="replace").split())
        if response.status_code == 429 or response.status_code >= 500:
            raise TransientToolError(f"HTTP {response.status_code} from {self.url}: {snippet}")
        if response.status_code >= 400:
            raise ToolError(f"HTTP {response.status_code} from {self.url}: {snippet}")
        status, text = STATUS_OK, response.text
        if "json" in response.headers.get("content-type", ""):
            if response.truncated:
                raise ToolError(f"the JSON answer from {self.url} is longer than max_response_bytes "
                                f"({self.max_response_bytes} bytes)")  # fmt: skip
            try:
                data = response.json()
            except ValueError as exc:
                raise TransientToolError(f"malformed JSON from {self.url}: {snippet}") from exc
            status, text = _from_json(data)
        elif response.truncated:
            text = f"{text}\n[answer cut at max_response_bytes = {self.max_response_bytes} bytes]"
        text = self.limit_observation(str(text).strip())
        if status == STATUS_ERROR:
            return ToolOutput(error_text(self.name, text or "the server reported an error"), STATUS_ERROR)
        if not text or status == STATUS_EMPTY:
            return ToolOutput(text or empty_output_text(self.name), STATUS_EMPTY)
        return ToolOutput(text, STATUS_OK)

    def close(self) -> None:
        r"""Close the HTTP client."""
        self._client.close()

    def __repr__(self) -> str:
        r"""Standard `__repr__` (no headers: they may hold keys)."""
        return f"HTTPTool(name={self.name!r}, tag={self.tag!r}, url={self.url!r}, timeout_s={self.timeout_s})"


def _from_json(data: Any) -> tuple[str, str]:
    r"""`(status, text)` of a JSON answer (see the module docstring)."""
    if isinstance(data, str):
        return STATUS_OK, data
    if isinstance(data, dict):
        if data.get("error"):
            error = data["error"]
            return STATUS_ERROR, error if isinstance(error, str) else canonical_json(error)
        status = data.get("status") if data.get("status") in (STATUS_OK, STATUS_EMPTY, STATUS_ERROR) else STATUS_OK
        for key in OBSERVATION_KEYS:
            if key in data:
                value = data[key]
                return status, value if isinstance(value, str) else canonical_json(value)
        return status, canonical_json(data)
    return STATUS_OK, "" if data is None else canonical_json(data)


def http_tool_specs(path: str, entries: Any, environ: dict[str, str] | None = None) -> list[Any]:
    r"""`ToolSpec`s (tool `http`) of a tool config's `http_tools:` list, validated.

    Each entry: `name` (the tool's name, also its tag unless `tag` is given), `url`, optional `tag`, `headers`,
    `timeout`, `retries`, `call_limit`, `dedup`, `max_output_chars`, `max_response_bytes`.

    Raises:
        ToolConfigError: naming the file, the entry and the fix.
    """
    import re

    from .registry import ToolSpec, _check_entry, checked_entry

    if not isinstance(entries, list):
        raise ToolConfigError(f"{path}: `http_tools` must be a list of tools ({{name, url, tag?, headers?}})")
    specs = []
    for i, entry in enumerate(entries):
        where = f"{path}: http_tools[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ToolConfigError(
                f"{where} needs a `name` (the tool's name, also its tag by default), got {describe_value(entry)}"
            )
        where = f"{where} ({entry['name']})"
        entry, secrets = checked_entry(where, entry, HTTP_TOOL_KEYS, environ)
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ToolConfigError(f"{where}: `url` must be an http:// or https:// endpoint, got {describe_value(url)}")
        if entry.get("tag") is None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", entry["name"]):
            raise ToolConfigError(f"{where}: the name is not a usable tag; add `tag:` (letters, digits, _ or -)")
        if entry.get("headers") is not None and not isinstance(entry["headers"], dict):
            raise ToolConfigError(f"{where}: `headers` must be a mapping of header names to values")
        _check_entry(where, entry)
        params: dict[str, Any] = {"url": url, "tool_name": entry["name"], "headers": entry.get("headers") or {}}
        for key in ("max_output_chars", "max_response_bytes"):
            if entry.get(key) is not None:
                params[key] = entry[key]
        specs.append(
            ToolSpec(
                name="http",
                tag=entry.get("tag") or entry["name"],
                timeout=entry.get("timeout"),
                retries=entry.get("retries"),
                call_limit=entry.get("call_limit"),
                dedup=entry.get("dedup"),
                params=params,
                secrets=secrets,
                where=where,
            )
        )
    return specs


__all__ = ["HTTP_MAX_RESPONSE_BYTES", "HTTPTool", "http_tool_specs"]
