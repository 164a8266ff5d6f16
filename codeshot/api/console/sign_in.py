"""Accounts in the console: sign up with email and password, confirm the emailed code,
sign in, and pick a username on the first sign-in (codeshot/usecases/accounts.py).

The forms post here and Cognito is called from the platform, so the browser talks only to
the platform. A sign-in answers with the ID token in an ``HX-Trigger`` header (an event
console.js turns into the tab's credential, as it does a typed API key): never in a URL
or a cookie.

Google and GitHub are the exception: the browser goes to the pool's hosted pages and
comes back to /console/auth/callback with a code (OAuth's code flow, with PKCE and a state
kept in a short-lived cookie scoped to the callback); the platform trades the code for the
ID token and hands it to console.js in the page it answers with.
"""

from __future__ import annotations

import json
import secrets

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from codeshot.api.console.web import (
    ConsoleRoute,
    form,
    html,
    services_of,
    shell,
    templates,
)
from codeshot.auth.cognito import CONSOLE_CALLBACK
from codeshot.auth.tokens import bearer
from codeshot.errors import CodeshotError, Conflict, InvalidInput, Unauthenticated
from codeshot.services import Services
from codeshot.usecases import accounts
from codeshot.usecases.threads import blocking

router = APIRouter(route_class=ConsoleRoute)
SIGNED_IN_EVENT = "codeshot:signed-in"


@router.post("/console/auth/sign-up")
async def sign_up(request: Request) -> HTMLResponse:
    fields = await form(request)
    email = fields.get("email", "")
    await blocking(accounts.sign_up, services_of(request), email, fields.get("password", ""))
    return html(templates.render("account/confirm.html", email=email.strip().lower(),
                                 local=services_of(request).settings.local_mode))


@router.post("/console/auth/confirm")
async def confirm(request: Request) -> HTMLResponse:
    fields = await form(request)
    await blocking(accounts.confirm, services_of(request), fields.get("email", ""),
                   fields.get("code", ""))
    return html(templates.render("account/confirmed.html"))


@router.post("/console/auth/sign-in")
async def sign_in(request: Request) -> HTMLResponse:
    fields = await form(request)
    token = await blocking(accounts.sign_in, services_of(request), fields.get("email", ""),
                           fields.get("password", ""))
    return html("", headers={"HX-Trigger": json.dumps({SIGNED_IN_EVENT: {"token": token}})})


@router.post("/console/auth/username")
async def choose_username(request: Request) -> HTMLResponse:
    """The first sign-in's last step; then the browser loads the Account page anew."""
    fields = await form(request)
    token = bearer(request.headers.get("authorization"))
    username = fields.get("username", "")
    try:
        await blocking(accounts.choose_username, services_of(request), token, username)
    except Conflict as error:  # taken: the form again, with what was typed
        return html(templates.render("account/username.html", error=error, username=username,
                                     email=None), status=422)
    return html("", headers={"HX-Redirect": "/console/account"})


STATE_COOKIE = "codeshot_sign_in"  # "<state>.<PKCE verifier>", for the callback only


def _redirect_uri(services: Services) -> str:
    return services.settings.api_url.rstrip("/") + CONSOLE_CALLBACK


@router.get("/console/auth/federated/{provider}")
async def federated(request: Request, provider: str) -> RedirectResponse:
    """Off to sign in with ``provider`` on the pool's hosted pages."""
    services = services_of(request)
    state, verifier = secrets.token_urlsafe(24), secrets.token_urlsafe(48)
    url = services.accounts.authorize_url(provider, _redirect_uri(services), state, verifier)
    response = RedirectResponse(url, status_code=303)
    response.set_cookie(STATE_COOKIE, f"{state}.{verifier}", max_age=600, path=CONSOLE_CALLBACK,
                        httponly=True, samesite="lax",
                        secure=services.settings.api_url.startswith("https:"))
    return response


@router.get(CONSOLE_CALLBACK)
async def callback(request: Request, code: str = "", state: str = "", error: str = "",
                   error_description: str = "") -> HTMLResponse:
    """Back from the hosted pages: the console's page, signed in (or saying why not)."""
    services = services_of(request)
    saved, _, verifier = request.cookies.get(STATE_COOKIE, "").partition(".")
    try:
        if error:
            raise Unauthenticated(f"the sign-in was refused: {error_description or error}")
        if not (saved and state and code and secrets.compare_digest(saved, state)):
            raise InvalidInput("this sign-in expired or did not start here: sign in again")
        token = await blocking(services.accounts.exchange_code, code,
                               _redirect_uri(services), verifier)
        response = shell(request, path="/console/", token=token)
    except CodeshotError as refused:
        response = shell(request, path="/console/", refused=refused)
    response.delete_cookie(STATE_COOKIE, path=CONSOLE_CALLBACK)
    return response
