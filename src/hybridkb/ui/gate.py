"""Who may use the pages of ``hybridkb ui``: the token, its cookie, and writes.

Threat: any local user (and, with ``--host``, anyone on the network) can connect to
the port, and any web page the user opens can make their browser send requests to
it (a form posted across sites, an image, DNS rebinding: a hostile name that resolves
to 127.0.0.1). The pages read and change the user's knowledge base and files.

Rules, checked here for every request before any page code runs:

* **Host** must be on the allow-list (loopback names, the bind address, this
  machine, ``--allow-host``): a rebinding page's Host is its own name.
* **The token** (the same scheme as ``hybridkb mcp --http``: generated per start into
  a 0600 file unless given) is proved once by the link ``hybridkb ui`` prints
  (``?token=...``): the answer sets an ``HttpOnly; SameSite=Strict`` cookie holding a
  value derived from the token (never the token itself) and redirects to the same
  address without it, so the token leaves the address bar and the history. Later
  requests carry the cookie; scripts may send ``Authorization: Bearer TOKEN``.
  Cookies do not tell ports apart, so the cookie's name carries the port.
* **Writes** (any method but GET and HEAD) must come from our own pages: the
  ``Origin`` header (or, without one, the ``Referer``) must be this server's address,
  and the request must carry the CSRF value (derived from the token) in the
  ``X-CSRF-Token`` header or the ``csrf`` form field; the form field is checked by
  :func:`check_csrf_form` in the write routes, which a test walks for every route.

Every answer carries a Content-Security-Policy that allows scripts, styles and
images from this server only (the pages need nothing else: no CDN), and forbids
framing.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from ..mcp.http_guard import ConnectionGuard

__all__ = [
    "CSRF_FIELD",
    "CSRF_HEADER",
    "BrowserGate",
    "check_csrf_form",
    "cookie_name",
    "derive",
    "host_allowed",
]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

CSRF_FIELD = "csrf"
CSRF_HEADER = b"x-csrf-token"
SAFE_METHODS = frozenset({"GET", "HEAD"})
SECURITY_HEADERS: list[tuple[bytes, bytes]] = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
]


def derive(token: str, purpose: str) -> str:
    """A value derived from the token for one purpose (the session cookie, the CSRF
    field): knowing it does not give the token, nor the value for another purpose."""
    return hmac.new(token.encode(), purpose.encode(), hashlib.sha256).hexdigest()


def cookie_name(port: int) -> str:
    """The session cookie's name: browsers send a cookie to every port of a host."""
    return f"hybridkb_ui_{port}"


def host_allowed(host: str, patterns: Sequence[str]) -> bool:
    """Whether a Host header value is on the allow-list (``name`` or ``name:*``)."""
    if not host:
        return False
    for pattern in patterns:
        if pattern.endswith(":*"):
            name = pattern[:-2]
            if host.startswith(name + ":") and host[len(name) + 1 :].isdigit():
                return True
        elif host == pattern:
            return True
    return False


def check_csrf_form(form_value: str | None, expected: str) -> bool:
    """Whether a write's ``csrf`` form field holds the expected value."""
    return form_value is not None and hmac.compare_digest(form_value, expected)


def _headers(scope: Scope) -> dict[bytes, bytes]:
    return {k.lower(): v for k, v in scope.get("headers") or []}


def _same_origin(headers: dict[bytes, bytes], host: str) -> bool:
    ours = f"http://{host}"
    origin = headers.get(b"origin")
    if origin is not None:
        return origin.decode("latin-1") == ours
    referer = headers.get(b"referer")
    if referer is None:
        return False
    parts = urlsplit(referer.decode("latin-1"))
    return f"{parts.scheme}://{parts.netloc}" == ours


class BrowserGate:
    """ASGI middleware enforcing the module's rules; lifespan events pass, any scope
    but ``http`` is refused (the pages need no WebSocket)."""

    def __init__(
        self,
        app: App,
        token: str,
        guard: ConnectionGuard | None,
        *,
        port: int,
        hosts: Sequence[str],
    ) -> None:
        self.app = app
        self.token = token
        self.guard = guard
        self.hosts = list(hosts)
        self.cookie = cookie_name(port)
        self.session = derive(token, "hybridkb-ui-session")
        self.csrf = derive(token, "hybridkb-ui-csrf")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self.app(scope, receive, send)
            return
        if kind != "http":
            if kind == "websocket":
                await receive()
                await send({"type": "websocket.close", "code": 1008})
            return
        headers = _headers(scope)
        host = headers.get(b"host", b"").decode("latin-1")
        if not host_allowed(host, self.hosts):
            await _answer(send, 421, "This server does not answer to that host name.")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:
            await self._exchange(scope, send, query)
            return
        if not self._proved(headers):
            await _answer(
                send,
                401,
                "This page needs the link that `hybridkb ui` printed (it carries "
                "?token=...). Open that link again; if the server was restarted, use the "
                "new link it printed.",
            )
            return
        if self.guard is not None:
            self.guard.prove(scope.get("client"))
        method = scope.get("method", "GET")
        if method not in SAFE_METHODS:
            if not _same_origin(headers, host):
                await _answer(
                    send,
                    403,
                    "Refused: this change did not come from a page of this server "
                    "(cross-site request). Make it from the page itself.",
                )
                return
            given = headers.get(CSRF_HEADER)
            scope["csrf_header_ok"] = given is not None and hmac.compare_digest(
                given.decode("latin-1"), self.csrf
            )
        scope.setdefault("state", {})["csrf"] = self.csrf
        await self.app(scope, receive, _with_headers(send))

    def _proved(self, headers: dict[bytes, bytes]) -> bool:
        auth = headers.get(b"authorization", b"")
        if auth and hmac.compare_digest(auth, f"Bearer {self.token}".encode()):
            return True
        jar: SimpleCookie = SimpleCookie()
        try:
            jar.load(headers.get(b"cookie", b"").decode("latin-1"))
        except CookieError:  # a malformed Cookie header proves nothing
            return False
        morsel = jar.get(self.cookie)
        return morsel is not None and hmac.compare_digest(morsel.value, self.session)

    async def _exchange(self, scope: Scope, send: Send, query: dict[str, str]) -> None:
        """``?token=`` proves the token once: set the cookie, go to the address without it."""
        if not hmac.compare_digest(query["token"].encode(), self.token.encode()):
            await _answer(
                send,
                401,
                "That link's token is not this server's (a link of an earlier start?). "
                "Open the link `hybridkb ui` printed last.",
            )
            return
        rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = f"{self.cookie}={self.session}; HttpOnly; SameSite=Strict; Path=/"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [
                    (b"location", location.encode("latin-1", "replace")),
                    (b"set-cookie", cookie.encode()),
                    (b"cache-control", b"no-store"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b""})


def _with_headers(send: Send) -> Send:
    async def sending(message: MutableMapping[str, Any]) -> None:
        if message.get("type") == "http.response.start":
            message["headers"] = [*(message.get("headers") or []), *SECURITY_HEADERS]
        await send(message)

    return sending


_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>hybridkb</title><meta name="viewport" content="width=device-width, initial-scale=1">
</head><body><main><h1>hybridkb</h1><p role="alert">{}</p></main></body></html>"""


async def _answer(send: Send, status: int, message: str) -> None:
    """A refusal as a small page (the message is ours: no user text in it)."""
    body = _PAGE.format(message).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/html; charset=utf-8"),
                (b"cache-control", b"no-store"),
                *SECURITY_HEADERS,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
