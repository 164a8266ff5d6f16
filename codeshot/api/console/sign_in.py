"""Accounts in the console: sign up with email and password, confirm the emailed code,
sign in, and pick a username on the first sign-in (codeshot/usecases/accounts.py).

The forms post here and Cognito is called from the platform, so the browser talks only to
the platform. A sign-in answers with the ID token in an ``HX-Trigger`` header (an event
console.js turns into the tab's credential, as it does a typed API key): never in a URL,
a cookie or the page.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from codeshot.api.console.web import (
    ConsoleRoute,
    form,
    html,
    services_of,
    templates,
)
from codeshot.auth.tokens import bearer
from codeshot.errors import Conflict
from codeshot.usecases import accounts
from codeshot.usecases.threads import blocking

router = APIRouter(route_class=ConsoleRoute)
SIGNED_IN_EVENT = "codeshot:signed-in"


@router.post("/console/auth/sign-up")
async def sign_up(request: Request) -> HTMLResponse:
    fields = await form(request)
    email = fields.get("email", "")
    await blocking(accounts.sign_up, services_of(request), email, fields.get("password", ""))
    return html(templates.render("account/confirm.html", email=email.strip().lower()))


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
