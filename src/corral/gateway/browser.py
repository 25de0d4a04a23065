"""Credentials from a browser, which cannot send `Authorization: Bearer`: a link carries the credential once
as `?corral_token=...`; the gateway answers it with a cookie scoped to the service's path (HttpOnly,
SameSite=Strict) and a redirect to the same URL without the parameter, so the credential leaves the address
bar and the browser's history at once. Later requests, WebSockets included, carry the cookie. The cookie is
the cluster credential: it is never passed on to the application (`strip_cookie`)."""
from __future__ import annotations

from http.cookies import CookieError, SimpleCookie

from aiohttp import web
from yarl import URL

COOKIE = "corral_token"
QUERY = "corral_token"


def credential_from(request: web.Request) -> str | None:
    """The request's credential as an Authorization header value: its own header, else the cookie."""
    header = request.headers.get("Authorization")
    if header:
        return header
    cookie = request.cookies.get(COOKIE)
    return f"Bearer {cookie}" if cookie else None


def login_redirect(request: web.Request, prefix: str) -> web.Response | None:
    """For a link carrying `?corral_token=`: a redirect to the same URL without it that sets the cookie on
    the service's path; None for any other request."""
    token = request.query.get(QUERY)
    if token is None:
        return None
    if not token.strip() or any(ch in token for ch in ";, \t\r\n\"\\"):
        return web.json_response({"detail": f"'{QUERY}' is not a credential"}, status=400)
    rest = [(key, value) for key, value in request.query.items() if key != QUERY]
    target = URL.build(path=request.path).with_query(rest) if rest else URL.build(path=request.path)
    response = web.Response(status=303, headers={"Location": str(target)})
    response.set_cookie(COOKIE, token.strip(), path=prefix + "/", httponly=True, samesite="Strict",
                        secure=request.scheme == "https")
    return response


def strip_cookie(cookie_header: str) -> str:
    """The Cookie header without corral's credential ("" when nothing else is left)."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(cookie_header)
    except CookieError:  # a header Python cannot parse: drop it whole rather than pass a credential on
        return ""
    return "; ".join(f"{name}={morsel.coded_value}" for name, morsel in jar.items() if name != COOKIE)
