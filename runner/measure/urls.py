"""Server URLs from the command line: validated, and never recorded with their credentials.

``http://user:pass@host:8000`` is split into the URL tally records and prints
(``http://host:8000``) and an ``Authorization: Basic`` header that carries the
credentials, so a server that needs them is still measured. A malformed URL is one
``FormatError`` line (exit 2) that does not echo the credentials either.

The header belongs to the URL's *origin* (scheme, host, port): :class:`OriginAuth`, an
``httpx.Auth`` given to a client, attaches each URL's credentials to the requests that
go to that origin and to no other (``--url http://op:pw@A --metrics-url http://B/metrics``
sends nothing to B). Never put a URL's ``headers`` on a client that also talks to
another origin; redirects are never followed, so a reply cannot send them elsewhere.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from collections.abc import Generator
from dataclasses import dataclass, field

import httpx

from ledger.errors import FormatError

__all__ = ["OriginAuth", "ServerURL", "has_credentials", "origin", "redact", "server_url"]

_USERINFO = re.compile(r"(//)[^/?#]*@")   # up to the authority's last @


def redact(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@`` (for error messages)."""
    return _USERINFO.sub(r"\1***@", url)


@dataclass(frozen=True)
class ServerURL:
    url: str                                   # without credentials
    headers: dict[str, str] = field(default_factory=dict)   # Authorization, when the URL had credentials

    @property
    def authorized(self) -> bool:
        return bool(self.headers)

    @property
    def origin(self) -> str:
        return origin(self.url)


_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str | httpx.URL) -> str:
    """``scheme://host:port`` of ``url``, the port always written (the default one for the scheme)."""
    parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
    scheme = parsed.scheme.lower()
    port = parsed.port if parsed.port is not None else _DEFAULT_PORTS.get(scheme, 0)
    host = parsed.host.lower()
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"


def has_credentials(url: str) -> bool:
    """Whether ``url`` has a ``user:password@`` part."""
    return _USERINFO.search(url) is not None


class OriginAuth(httpx.Auth):
    """Each URL's credentials, sent only with requests to that URL's origin (scheme, host, port).

    Built from the :class:`ServerURL` values a command was given; a URL without
    credentials adds nothing (its requests get the credentials of another URL of the same
    origin, if any: the same server). Two URLs of one origin with different credentials
    are refused: which to send would be a guess. At its origin the URL's header replaces
    any Authorization the request already has (the URL's own credentials win there).
    """

    def __init__(self, *servers: ServerURL) -> None:
        self._by_origin: dict[str, str] = {}
        for server in servers:
            value = server.headers.get("Authorization")
            if value is None:
                continue
            key = server.origin
            if self._by_origin.setdefault(key, value) != value:
                raise FormatError(f"two URLs of {key} carry different credentials: give them once")

    def __bool__(self) -> bool:
        return bool(self._by_origin)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        value = self._by_origin.get(origin(request.url))
        if value is not None:
            request.headers["Authorization"] = value
        yield request


def server_url(value: str, option: str = "--url", *, query: bool = False) -> ServerURL:
    """Validate an http(s) URL and take its credentials out (see the module docstring)."""
    shown = redact(value)
    if not value or any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        raise FormatError(f"{option} must be an http(s) URL without spaces or control characters, got {shown!r}")
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError as exc:
        raise FormatError(f"{option} is not a valid URL ({exc}): {shown!r}") from None
    if parts.scheme not in ("http", "https"):
        raise FormatError(f"{option} must be an http(s) URL, got {shown!r}")
    if not parts.hostname:
        raise FormatError(f"{option} has no host: {shown!r}")
    if parts.fragment or (parts.query and not query):
        raise FormatError(f"{option} must not have a {'fragment' if parts.fragment else 'query'}: {shown!r}")
    netloc = parts.netloc.rpartition("@")[2]
    clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    try:
        httpx.URL(clean)
    except (httpx.InvalidURL, ValueError) as exc:
        raise FormatError(f"{option} is not a valid URL ({exc}): {redact(clean)!r}") from None
    headers: dict[str, str] = {}
    if "@" in parts.netloc:
        user = urllib.parse.unquote(parts.username or "")
        password = urllib.parse.unquote(parts.password or "")
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        headers["Authorization"] = f"Basic {token}"
    return ServerURL(clean, headers)
