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

r"""The HTTP transport under the MCP tool's streamable-HTTP sessions (docs/tools.md "MCP servers").

An `httpx2` transport (the `mcp` package's HTTP client library) for two limits the package leaves open:

* **A timed-out call's stream.** The package keeps a request's POST open until the server answers, also after the
  request timed out; a server that never answers holds one connection per timed-out call for the life of the session.
  `CallStreams` knows each call's requests and responses (by a context variable the call sets; the package sends a
  request from a copy of the caller's context), and `close_call` ends them when the call ends: an SSE response stream
  is closed, and a request still waiting for its response headers (a JSON answer comes only when the tool is done) is
  cancelled and answered `202 Accepted`, which the package takes as "no answer will come" for a request nobody awaits
  any more (raising instead would end the whole session).
* **A JSON answer's size.** The package's SSE event limit (`max_sse_event_size`) bounds an SSE answer; a plain JSON
  body is read whole. `BoundedBody` stops it at `max_bytes` with `httpx2.StreamError`, which the package turns into
  an error answer to that request (`TOO_LARGE_TEXT` in its message).
"""

import asyncio
import contextvars
import weakref
from typing import Any

import httpx2

from ..common.log import get_logger
from .mcp_stdio import TOO_LARGE_TEXT


logger = get_logger(__name__)


class BoundedBody(httpx2.AsyncByteStream):
    r"""A response body that raises `httpx2.StreamError` once more than `max_bytes` bytes came in (the rest unread)."""

    def __init__(self, stream: Any, max_bytes: int) -> None:
        r"""Wrap `stream` (a response's `httpx2.AsyncByteStream`)."""
        self._stream, self._max_bytes = stream, max_bytes

    async def __aiter__(self) -> Any:
        r"""The chunks of the body, up to `max_bytes` bytes in all."""
        total = 0
        async for chunk in self._stream:
            total += len(chunk)
            if total > self._max_bytes:
                raise httpx2.StreamError(f"{TOO_LARGE_TEXT} of {self._max_bytes} bytes")
            yield chunk

    async def aclose(self) -> None:
        r"""Close the wrapped body."""
        await self._stream.aclose()


class CallStreams(httpx2.AsyncBaseTransport):
    r"""`inner` plus the bookkeeping of each MCP call's responses and the JSON body bound (see the module docstring).

    Args:
        inner: The real transport (`httpx2.AsyncHTTPTransport()`).
        max_bytes: Bound of a JSON answer's body (`max_result_bytes`).
        call_var: The context variable holding the current call's token (None outside a call).
    """

    def __init__(self, inner: Any, max_bytes: int, call_var: contextvars.ContextVar) -> None:
        r"""Create the object (the arguments are described in the class docstring)."""
        self._inner = inner
        self._max_bytes = max_bytes
        self._call_var = call_var
        self._streams: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # call -> its responses
        self._ended: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # call -> set when the call ends
        self.closed_open_streams = 0  # requests or streams still open when their call ended (a timed-out call)

    async def handle_async_request(self, request: Any) -> Any:
        r"""Send `request`; bound a JSON answer's body; remember the response under the current call.

        A request of a call that ends before the response headers arrive is cancelled and answered `202 Accepted`.
        """
        call = self._call_var.get()
        if call is None:
            response = await self._inner.handle_async_request(request)
        else:
            ended = self._ended.setdefault(call, asyncio.Event())
            sending = asyncio.ensure_future(self._inner.handle_async_request(request))
            waiting = asyncio.ensure_future(ended.wait())
            try:
                await asyncio.wait({sending, waiting}, return_when=asyncio.FIRST_COMPLETED)
            except BaseException:  # cancelled (the session is closing): the request goes too
                sending.cancel()
                raise
            finally:
                waiting.cancel()
            if not sending.done():
                sending.cancel()
                self.closed_open_streams += 1
                return httpx2.Response(202, request=request)
            response = sending.result()
            self._streams.setdefault(call, []).append(response)
        if response.headers.get("content-type", "").startswith("application/json"):
            response.stream = BoundedBody(response.stream, self._max_bytes)
        return response

    async def close_call(self, call: object) -> None:
        r"""End `call`'s requests still waiting and close its responses (a finished one is closed: nothing happens)."""
        ended = self._ended.pop(call, None)
        if ended is not None:
            ended.set()
        for response in self._streams.pop(call, []):
            if not response.is_closed:
                self.closed_open_streams += 1
            try:
                await response.aclose()
            except Exception as exc:  # noqa: BLE001 - closing a broken stream
                logger.debug("[agentic-tools] closing an MCP response stream: %r", exc)

    async def aclose(self) -> None:
        r"""Close the wrapped transport."""
        await self._inner.aclose()


__all__ = ["BoundedBody", "CallStreams"]
