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

Failures follow the search backends (`search.HTTPBackend`): timeouts, connection errors, HTTP 429 and 5xx and a
malformed JSON answer are transient (retried with exponential backoff while the call's `timeout_s` allows), other
4xx answers are final; either way the call ends as an "error" or "timeout" observation, never an exception. Results
are cached by the executor like search results (`cache.tools` names the tool; the key is the canonical JSON of the
arguments, or the whitespace-collapsed body when it is not a JSON object).
"""

import json
from typing import Any

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
HTTP_TOOL_KEYS = ("name", "url", "tag", "headers", "timeout", "retries", "call_limit", "dedup", "max_output_chars")


@register_tool("http")
class HTTPTool(BaseTool):
    r"""A tool served over HTTP (see the module docstring for the request and the answer).

    Args:
        url: the endpoint the calls are POSTed to (`http://` or `https://`).
        tool_name: the tool's name (metrics, cache, the request's `tool` field; default the tag).
        headers: HTTP headers sent with every call (values from `${VAR}` are secrets: redacted, never logged).
        max_output_chars: observation cap in characters (head and tail kept; default
            `agentic_python_max_output_chars`'s).
        **kwargs: `BaseTool` arguments (tag, timeout_s, retries, call_limit, dedup, backoff_s); `timeout_s` is also
            each request's timeout.

    Raises:
        ValueError: a URL that is not http(s), headers that are not a mapping, a bad `max_output_chars`.
    """

    name = "http"
    default_tag = "http"

    def __init__(
        self,
        url: str,
        tool_name: str | None = None,
        headers: dict[str, str] | None = None,
        max_output_chars: int = PYTHON_MAX_OUTPUT_CHARS,
        **kwargs: Any,
    ) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        import httpx

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
        self.add_secrets(*self.headers.values())
        self._client = httpx.Client(timeout=self.timeout_s, headers=self.headers, follow_redirects=True)

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
            TransientToolError: timeout, connection error, HTTP 429/5xx, a JSON content type with a malformed body.
            ToolError: another HTTP 4xx answer (its first 200 characters in the message).
        """
        import httpx

        body, arguments = args
        try:
            response = self._client.post(self.url, json={"tool": self.name, "content": body, "arguments": arguments})
        except httpx.TimeoutException as exc:
            raise TransientToolError(f"no answer from {self.url} within {self.timeout_s:g} seconds") from exc
        except httpx.HTTPError as exc:
            raise TransientToolError(f"request to {self.url} failed: {type(exc).__name__}: {exc}") from exc
        snippet = " ".join(response.text[:200].split())
        if response.status_code == 429 or response.status_code >= 500:
            raise TransientToolError(f"HTTP {response.status_code} from {self.url}: {snippet}")
        if response.status_code >= 400:
            raise ToolError(f"HTTP {response.status_code} from {self.url}: {snippet}")
        status, text = STATUS_OK, response.text
        if "json" in response.headers.get("content-type", ""):
            try:
                data = response.json()
            except ValueError as exc:
                raise TransientToolError(f"malformed JSON from {self.url}: {snippet}") from exc
            status, text = _from_json(data)
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
    `timeout`, `retries`, `call_limit`, `dedup`, `max_output_chars`.

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
        if entry.get("max_output_chars") is not None:
            params["max_output_chars"] = entry["max_output_chars"]
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


__all__ = ["HTTPTool", "http_tool_specs"]
