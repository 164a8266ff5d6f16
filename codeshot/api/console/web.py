"""What every console page shares: templates, versioned static files, the page shell,
the caller's credentials, form bodies and errors rendered as HTML.

A page is served twice. A plain browser request (a link, a reload, a bookmark) gets the
shell: the layout with no data, which carries no credentials and needs none. The shell's
script then asks for the same URL through htmx with the key from session storage as
``Authorization: Bearer``, and that request (``HX-Request: true``) gets the page's
content. Nothing private is ever rendered without the header, and the key never appears
in a URL or a cookie.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, Response
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

from codeshot.api.errors import as_codeshot_error
from codeshot.auth.cognito import POOL
from codeshot.auth.tokens import bearer
from codeshot.errors import INTERNAL_MESSAGE, CodeshotError, InvalidInput
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases.accounts import NoUsername
from codeshot.usecases.sessions import TEXT_PREVIEW_BYTES
from codeshot.usecases.threads import blocking

if TYPE_CHECKING:
    from jinja2 import Environment

HERE = Path(__file__).resolve().parent
STATIC = HERE / "static"
VENDOR = STATIC / "vendor"
# The files `make assets` copies from npm (web/package.json lists them under "vendor").
REQUIRED_VENDOR = ("htmx.min.js", "react.production.min.js", "react-dom.production.min.js",
                   "graphiql.min.js", "graphiql.min.css", "graphiql-explorer.umd.js",
                   "graphiql-explorer.css")
STATIC_PREFIX = "/console/static"
MAX_FORM_FIELDS = 50
log = logging.getLogger("codeshot.api")


@cache
def _digest(name: str) -> str:
    return hashlib.sha256((STATIC / name).read_bytes()).hexdigest()[:12]


def static_url(name: str) -> str:
    """A static file's URL with its content's hash: cached by browsers for good, and a
    new version gets a new URL."""
    return f"{STATIC_PREFIX}/{name}?v={_digest(name)}"


class Assets(StaticFiles):
    """The console's static files: versioned URLs are immutable, others revalidate."""

    def file_response(self, full_path: Any, stat_result: Any, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        versioned = b"v=" in scope.get("query_string", b"")
        response.headers["Cache-Control"] = \
            "public, max-age=31536000, immutable" if versioned else "no-cache"
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response


def missing_assets() -> list[str]:
    return [name for name in REQUIRED_VENDOR if not (VENDOR / name).is_file()]


class Templates:
    """The Jinja environment, built on first use: most API requests never render a page,
    and Lambda cold starts should not pay for it."""

    @cached_property
    def env(self) -> Environment:
        from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

        env = Environment(loader=FileSystemLoader(HERE / "templates"),
                          autoescape=select_autoescape(default=True),
                          undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        env.globals |= {"static_url": static_url, "text_preview_bytes": TEXT_PREVIEW_BYTES}
        env.filters |= {"web_url": web_url, "when": when, "duration": duration,
                        "filesize": filesize}
        return env

    def render(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(**context)


templates = Templates()


def when(value: datetime) -> str:
    """A time as the page shows it before the browser puts it in the reader's zone."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def duration(value: timedelta) -> str:
    minutes = max(int(value.total_seconds() // 60), 0)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def filesize(size: int) -> str:
    if size < 1024:
        return f"{size:,} bytes"
    return f"{size / 1024:.1f} KB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MB"


def web_url(value: str | None) -> str | None:
    """``value`` when it is an http(s) URL, else None: never a javascript: or data: link."""
    if value and urlsplit(value).scheme in ("http", "https"):
        return value
    return None


SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # presigned embed URLs must not leak onwards
}


def content_security_policy(images: str = "", styles: str = "'self'") -> str:
    """No inline script, no other origin: an injected <script> or handler never runs."""
    return "; ".join([
        "default-src 'none'", "script-src 'self'", f"style-src {styles}",
        f"img-src 'self' data: {images}".strip(), "font-src 'self' data:",
        "connect-src 'self'", "form-action 'self'", "base-uri 'none'", "frame-ancestors 'none'",
    ])


def html(body: str, status: int = 200, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers={
        **SECURITY_HEADERS, "Cache-Control": "no-store", "Vary": "HX-Request", **(headers or {})})


def embeds_origin(services: Services) -> str:
    """Where presigned embed URLs point (S3, or moto locally): images load from there.
    Signing a URL is local computation, no request."""
    parts = urlsplit(services.embeds.get_url("0" * 64))
    return f"{parts.scheme}://{parts.netloc}"


def shell(request: Request, path: str | None = None, token: str | None = None,
          refused: CodeshotError | None = None) -> HTMLResponse:
    """The page without data; its script loads the content with the caller's key. Back
    from Google or GitHub sign-in, it carries the account's ID token for the script to
    keep (``token``), or why the sign-in failed (``refused``), and loads ``path``."""
    services: Services = request.app.state.services
    missing = missing_assets()
    settings = services.settings
    providers = services.accounts.providers() if settings.user_pool_client_id else []
    body = templates.render("shell.html", missing=missing, path=path or request.url.path,
                            query="" if path else request.url.query,
                            max_message_length=settings.max_message_length,
                            accounts=bool(settings.user_pool_client_id), providers=providers,
                            password_rule=POOL.password_rule(), token=token, refused=refused)
    csp = content_security_policy(images=embeds_origin(services))
    return html(body, status=503 if missing else 200,
                headers={"Content-Security-Policy": csp})


def is_page_request(request: Request) -> bool:
    """An htmx request for content, not a browser navigation or a history restore."""
    return request.headers.get("HX-Request") == "true" \
        and request.headers.get("HX-History-Restore-Request") != "true"


class ShellNeeded(Exception):
    """Raised for a browser navigation to a page: the app answers with the shell."""


def page_request(request: Request) -> None:
    """A dependency of every page: a plain navigation gets the shell instead."""
    if not is_page_request(request):
        raise ShellNeeded


def services_of(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


async def caller(request: Request) -> Principal:
    """The signed-in user: an API key or an account's ID token, sent as a Bearer token.

    This is the one place that turns the console's credential into a user; an account
    with no username yet raises NoUsername (the page asks for one)."""
    from codeshot.usecases.accounts import principal_for_token

    token = bearer(request.headers.get("authorization"))
    return await blocking(principal_for_token, services_of(request), token)


async def form(request: Request) -> dict[str, str]:
    """A urlencoded form body (what htmx sends), the last value of each field."""
    if not request.headers.get("content-type", "").startswith(
            "application/x-www-form-urlencoded"):
        raise InvalidInput("expected a form (application/x-www-form-urlencoded)")
    try:
        text = (await request.body()).decode("utf-8")
        return dict(parse_qsl(text, keep_blank_values=True, strict_parsing=False,
                              max_num_fields=MAX_FORM_FIELDS))
    except ValueError as exc:  # undecodable bytes or too many fields
        raise InvalidInput(f"unreadable form: {exc}") from exc


def error_response(request: Request, error: CodeshotError) -> HTMLResponse:
    """The error as the page shows it: a whole page when a page was asked for (a link),
    else a message for where the user acted (console.js puts it there)."""
    page = request.method == "GET" and request.headers.get("HX-Target") == "main"
    body = templates.render("error_page.html" if page else "error.html", error=error)
    return html(body, status=error.http_status)


class ConsoleRoute(APIRoute):
    """Console routes answer errors with HTML the page shows where the user acted
    (GraphQL and REST answer the same errors as JSON). A page answers HEAD as GET (the
    server sends no body): uptime probes ask with HEAD."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self.methods and "GET" in self.methods:
            self.methods.add("HEAD")

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except ShellNeeded:
                return shell(request)
            except NoUsername as exc:
                if request.method == "GET" and request.headers.get("HX-Target") == "main":
                    return html(templates.render("account/username.html", error=None,
                                                 username="", email=exc.identity.email))
                return error_response(request, exc)
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()))
                return error_response(request,
                                      InvalidInput(f"{where}: {first.get('msg', 'invalid')}"))
            except Exception as exc:
                known = as_codeshot_error(exc)
                if known is None:
                    log.error("unexpected error in %s", request.url.path, exc_info=exc)
                    known = CodeshotError(INTERNAL_MESSAGE)
                return error_response(request, known)

        return handle
