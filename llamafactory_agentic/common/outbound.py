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

r"""Outbound HTTP with a whole-request deadline, a byte bound, a redirect rule and an address policy (docs/tools.md).

httpx's timeouts are per network operation: a server that sends one byte a second never trips them. Every outbound
call of the plugin (HTTP tools, the LLM judge and browse summariser, evaluation servers, browse page downloads) goes
through `fetch` on a client from `outbound_client`:

* **deadline**: the client's sockets (an httpcore network backend around httpcore's own) bound every connect, read and
  write by the time left until the request's deadline, so connecting, sending, the status line, the headers and the
  body all end by then: `DeadlineExceeded` (an `httpx.TimeoutException`) at the latest `deadline_s` after the start,
  a trickling server included;
* **byte bound**: the body is streamed and reading stops at `max_bytes` (kept and marked `truncated`, or
  `BodyTooLarge`); redirect bodies are never read;
* **redirects**: `none` (a redirect is the answer), `same_origin` (followed only to the same scheme, host and port,
  else `RedirectRefused`: the body and the headers never reach another origin) or `follow` (up to `max_redirects`,
  every hop checked by the address policy);
* **addresses** (`AddressPolicy`): loopback, private, link-local (cloud metadata `169.254.169.254`), shared,
  reserved, multicast and unspecified addresses are refused after DNS resolution, at every hop and again when the
  socket connects (the checked address is the one connected to, so a name that re-resolves elsewhere cannot slip
  through), unless the host is named in the policy's allow list. `AddressRefused` is raised before anything is sent.

Own code rather than a library because httpx has no whole-request deadline or body bound, and the two well-kept
SSRF guards for Python target `requests`/`urllib3`, not httpx; this module only plugs into httpcore's public
network-backend interface (`httpcore.NetworkBackend`). Environment proxies (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`)
are honoured; through a proxy the address policy checks the URL's resolved addresses (the proxy resolves again).
"""

import ipaddress
import json as _json
import socket
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpcore
import httpx


REDIRECT_CODES = (301, 302, 303, 307, 308)
REDIRECT_RULES = ("none", "same_origin", "follow")
_local = threading.local()  # `deadline`: time.monotonic() value the current thread's request must end by


class OutboundError(httpx.HTTPError):
    r"""An outbound call refused or cut by this module's limits (never retried: another attempt gets the same)."""


class DeadlineExceeded(httpx.TimeoutException):
    r"""The whole request (connect, send, headers, body, redirects) did not end within its deadline."""


class BodyTooLarge(OutboundError):
    r"""The answer's body is larger than the byte bound."""


class RedirectRefused(OutboundError):
    r"""A redirect that the call's redirect rule does not follow (another origin, or too many hops)."""


class AddressRefused(OutboundError):
    r"""The host resolves to an internal address (loopback, private, link-local, ...) that is not allowed."""


# ---------------------------------------------------------------------------------------------- addresses
class AddressPolicy:
    r"""Which addresses outbound calls may reach: public ones, plus the hosts and networks named in `allow`.

    Args:
        allow: Hosts that may be reached although internal: names or addresses as written in the URL (`wiki.corp`,
            `10.1.2.3`, `::1`; compared exactly, case-insensitively: allowing `127.0.0.1` does not allow
            `localhost`), or networks (`10.0.0.0/8`) that allow every host resolving into them.

    Raises:
        ValueError: an entry that is neither a host name nor an address or network.
    """

    def __init__(self, allow: Iterable[str] | str | None = None) -> None:
        r"""Create the policy (arguments in the class docstring)."""
        if isinstance(allow, str):
            allow = [a for a in allow.replace(",", " ").split() if a]
        self.names: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for entry in allow or ():
            entry = str(entry).strip().lower().strip("[]")
            if not entry:
                continue
            if "/" in entry:
                try:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    raise ValueError(f"not an address network: {entry!r}") from None
                continue
            try:
                entry = str(ipaddress.ip_address(entry))
            except ValueError:
                if not all(part and part.replace("-", "").replace("_", "").isalnum() for part in entry.split(".")):
                    raise ValueError(f"not a host name, address or network: {entry!r}") from None
            self.names.add(entry)

    @staticmethod
    def internal(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        r"""True for every address that is not a public unicast one (IPv4-mapped IPv6 judged as its IPv4)."""
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return not ip.is_global or ip.is_multicast

    def allowed_ip(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        r"""True when `ip` is public or inside an allowed network."""
        return not self.internal(ip) or any(ip in net for net in self.networks if net.version == ip.version)

    def resolve(self, host: str, port: int) -> list[str]:
        r"""The addresses `host` resolves to, all checked (a name in the allow list: `[host]`, unresolved).

        Raises:
            AddressRefused: one of the addresses is internal and not allowed (naming the host and the address).
            httpx.ConnectError: the name does not resolve.
        """
        name = host.lower().strip("[]")
        try:
            canonical = str(ipaddress.ip_address(name))
        except ValueError:
            canonical = name
        if canonical in self.names:
            return [host]
        try:
            infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise httpx.ConnectError(f"cannot resolve {host!r}: {exc}") from None
        addresses = list(dict.fromkeys(info[4][0] for info in infos))
        for address in addresses:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
            if not self.allowed_ip(ip):
                raise AddressRefused(
                    f"{host} resolves to the internal address {ip} (loopback, private, link-local or reserved), "
                    "which outbound calls never reach; name the host in the allow list to reach it on purpose"
                )
        return addresses

    def check_url(self, url: str | httpx.URL, resolve_errors: bool = True) -> None:
        r"""Raise `AddressRefused` when `url`'s host resolves to an address this policy refuses.

        Args:
            url: An absolute http(s) URL.
            resolve_errors: False: a host that does not resolve passes (e.g. looking up a cache offline).
        """
        url = httpx.URL(str(url))
        try:
            self.resolve(url.host, url.port or (443 if url.scheme == "https" else 80))
        except httpx.ConnectError:
            if resolve_errors:
                raise


# ---------------------------------------------------------------------------------------------- sockets
def _left(timeout: float | None, kind: type[Exception]) -> float | None:
    r"""`timeout` bounded by the current thread's deadline; raises `kind` when the deadline has passed."""
    deadline = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise kind("the request's deadline has passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    r"""A socket stream whose every read and write ends by the request's deadline."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        stream = self._inner.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(stream)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _GuardedBackend(httpcore.NetworkBackend):
    r"""httpcore's sync backend with the deadline on every socket and (direct connections) the address policy."""

    def __init__(self, policy: AddressPolicy | None) -> None:
        self._inner = httpcore.SyncBackend()
        self.policy = policy

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:  # fmt: skip
        timeout = _left(timeout, httpcore.ConnectTimeout)
        targets = [host] if self.policy is None else self.policy.resolve(host, port)
        error: Exception | None = None
        for target in targets:  # the checked addresses themselves are connected to
            try:
                stream = self._inner.connect_tcp(target, port, timeout, local_address, socket_options)
                return _DeadlineStream(stream)
            except httpcore.ConnectError as exc:
                error = exc
        raise error or httpcore.ConnectError(f"cannot connect to {host}:{port}")

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                               socket_options))  # fmt: skip

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Transport(httpx.HTTPTransport):
    r"""httpx's transport on the guarded backend (the backend is httpcore's documented extension point)."""

    def __init__(self, policy: AddressPolicy | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._pool._network_backend = _GuardedBackend(policy)  # httpx builds the pool; only its backend changes


def outbound_client(
    headers: dict[str, str] | None = None, policy: AddressPolicy | None = None, max_connections: int = 100
) -> httpx.Client:
    r"""An `httpx.Client` whose sockets honour `fetch`'s deadline and, with `policy`, refuse internal addresses.

    Use it through `fetch`: the client has no timeout of its own (a silent server may take up to the deadline).

    Args:
        headers: Headers sent with every request.
        policy: The address policy (None: the configured URL is the user's choice, no address check).
        max_connections: Connection pool size.

    Environment proxies are mounted per scheme (`NO_PROXY` hosts go direct); their sockets honour the deadline.
    """
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=min(20, max_connections))
    mounts: dict[str, httpx.BaseTransport | None] = {}
    proxies = urllib.request.getproxies()
    for scheme in ("http", "https"):
        if proxies.get(scheme):
            mounts[f"{scheme}://"] = _Transport(None, proxy=proxies[scheme], limits=limits, trust_env=False)
    if mounts:
        for host in (proxies.get("no") or "").split(","):
            host = host.strip().lstrip(".")
            if host and host != "*":
                mounts[f"all://*{host}"] = None  # direct, through the default transport
    return httpx.Client(
        headers=headers,
        timeout=None,  # no per-operation limit of httpx's own (its default is 5 s): `fetch`'s deadline bounds it all
        transport=_Transport(policy, limits=limits, trust_env=False),
        mounts=mounts,
        trust_env=False,
        follow_redirects=False,
    )


# ---------------------------------------------------------------------------------------------- requests
@dataclass
class Fetched:
    r"""An answer read by `fetch`.

    Attributes:
        status_code: The HTTP status.
        headers: The answer's headers.
        content: The body (at most the byte bound; decoded from gzip/deflate).
        url: The URL that answered (after redirects).
        truncated: True when reading stopped at the byte bound.
        request: The request that got this answer.
    """

    status_code: int
    headers: httpx.Headers
    content: bytes
    url: str
    truncated: bool
    request: httpx.Request

    @property
    def text(self) -> str:
        r"""The body decoded with the answer's charset (UTF-8 by default, bad bytes replaced)."""
        return self.content.decode(self.encoding, errors="replace")

    @property
    def encoding(self) -> str:
        r"""The answer's charset, UTF-8 when none or an unknown one is given."""
        charset = httpx.Response(200, headers=self.headers).charset_encoding or "utf-8"
        try:
            "".encode(charset)
        except LookupError:
            return "utf-8"
        return charset

    @property
    def is_success(self) -> bool:
        r"""2xx."""
        return 200 <= self.status_code < 300

    def json(self) -> Any:
        r"""The body parsed as JSON (raises `ValueError`)."""
        return _json.loads(self.content)

    def response(self) -> httpx.Response:
        r"""The answer as an `httpx.Response` (already read), for code written against httpx."""
        return httpx.Response(self.status_code, headers=self.headers, content=self.content, request=self.request)

    def raise_for_status(self) -> "Fetched":
        r"""Raise `httpx.HTTPStatusError` for a 4xx/5xx answer (as httpx does); returns self otherwise."""
        self.response().raise_for_status()
        return self

    def retry_after_s(self) -> float | None:
        r"""Seconds asked for by a `Retry-After` header (delta seconds or an HTTP date), or None."""
        return retry_after_s(self.headers)


def retry_after_s(headers: httpx.Headers | dict[str, str] | None) -> float | None:
    r"""Seconds asked for by a `Retry-After` header (delta seconds or an HTTP date; RFC 9110 §10.2.3), or None."""
    value = (headers or {}).get("retry-after")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _same_origin(a: httpx.URL, b: httpx.URL) -> bool:
    return (a.scheme, a.host, a.port or (443 if a.scheme == "https" else 80)) == (
        b.scheme,
        b.host,
        b.port or (443 if b.scheme == "https" else 80),
    )


def fetch(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    deadline_s: float,
    max_bytes: int,
    json: Any = None,
    params: Any = None,
    headers: dict[str, str] | None = None,
    redirects: str = "none",
    max_redirects: int = 5,
    policy: AddressPolicy | None = None,
    truncate: bool = False,
    check_headers: Callable[[int, httpx.Headers], None] | None = None,
) -> Fetched:
    r"""One HTTP request that ends within `deadline_s` seconds and reads at most `max_bytes` bytes of body.

    Args:
        client: A client from `outbound_client` (its sockets enforce the deadline).
        method: HTTP method.
        url: Absolute http(s) URL.
        deadline_s: Seconds for the whole request, redirects included.
        max_bytes: Most body bytes read.
        json: JSON body (None: no body).
        params: Query parameters of the first request (a redirect's target carries its own).
        headers: Extra headers for this request.
        redirects: `none`, `same_origin` or `follow` (module docstring).
        max_redirects: Most hops followed.
        policy: Address policy checked on the URL and every redirect target (the client's own policy checks the
            connected socket as well).
        truncate: True: a longer body is cut at `max_bytes` (`truncated` set); False: `BodyTooLarge`.
        check_headers: Called with the final status and headers before the body is read (raise to refuse it).

    Returns:
        The answer (`Fetched`).

    Raises:
        DeadlineExceeded: the request did not end in time.
        BodyTooLarge: the body is longer than `max_bytes` and `truncate` is False.
        RedirectRefused: a redirect the rule does not follow.
        AddressRefused: the URL or a redirect target resolves to a refused address.
        httpx.HTTPError: connection and protocol errors as httpx raises them.
    """
    if redirects not in REDIRECT_RULES:
        raise ValueError(f"redirects must be one of {REDIRECT_RULES}, got {redirects!r}")
    start = time.monotonic()
    deadline = start + float(deadline_s)
    outer = getattr(_local, "deadline", None)
    _local.deadline = deadline if outer is None else min(outer, deadline)
    current = httpx.URL(url)
    first = current
    body = json
    try:
        for hop in range(max_redirects + 1):
            if policy is not None:
                policy.check_url(current)
            request = client.build_request(method, current, json=body, headers=headers,
                                           params=params if hop == 0 else None)  # fmt: skip
            response = client.send(request, stream=True)
            try:
                location = response.headers.get("location")
                if response.status_code in REDIRECT_CODES and location and redirects != "none":
                    target = current.join(location)
                    if target.scheme not in ("http", "https"):
                        raise RedirectRefused(f"{current} redirects to {target.scheme}: URL, which is not followed")
                    if redirects == "same_origin" and not _same_origin(first, target):
                        raise RedirectRefused(
                            f"{current} redirects to another origin ({target.scheme}://{target.host}); the request "
                            "(body and headers) is not sent there"
                        )
                    if hop == max_redirects:
                        raise RedirectRefused(f"more than {max_redirects} redirects from {url}")
                    if response.status_code not in (307, 308):
                        method, body = "GET", None
                    current = target
                    continue
                if check_headers is not None:
                    check_headers(response.status_code, response.headers)
                chunks, size, truncated = [], 0, False
                for chunk in response.iter_bytes():
                    if size + len(chunk) > max_bytes:
                        if not truncate:
                            raise BodyTooLarge(f"the answer from {current.host} is larger than {max_bytes} bytes")
                        chunks.append(chunk[: max_bytes - size])
                        truncated = True
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                return Fetched(response.status_code, response.headers, b"".join(chunks), str(current), truncated,
                               request)  # fmt: skip
            finally:
                response.close()
        raise RedirectRefused(f"more than {max_redirects} redirects from {url}")  # pragma: no cover - loop returns
    except httpx.TimeoutException as exc:
        if time.monotonic() >= deadline - 0.01:
            raise DeadlineExceeded(f"no complete answer from {first.host} within {deadline_s:.3g} seconds") from exc
        raise
    finally:
        _local.deadline = outer


__all__ = [
    "AddressPolicy",
    "AddressRefused",
    "BodyTooLarge",
    "DeadlineExceeded",
    "Fetched",
    "OutboundError",
    "RedirectRefused",
    "fetch",
    "outbound_client",
    "retry_after_s",
]
