"""Server URLs from the command line: validated, and never recorded with their credentials.

``http://user:pass@host:8000`` is split into the URL tally records and prints
(``http://host:8000``) and an ``Authorization: Basic`` header that carries the
credentials, so a server that needs them is still measured. A malformed URL is one
``FormatError`` line (exit 2) that does not echo the credentials either.
"""

from __future__ import annotations

import base64
import re
import urllib.parse
from dataclasses import dataclass, field

import httpx

from ledger.errors import FormatError

__all__ = ["ServerURL", "redact", "server_url"]

_USERINFO = re.compile(r"(//)[^/?#@]*@")


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
