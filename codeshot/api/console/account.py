"""The account page: who is signed in, today's quota and when it resets, the API keys
(listed by id and creation time, created: the key is shown once, and revoked), and the
agents holding the user's OAuth tokens (revoked), and the deletion of the account
(confirmed by typing the username)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from codeshot import ids
from codeshot.api.console.web import (
    ConsoleRoute,
    caller,
    form,
    html,
    page_request,
    services_of,
    templates,
)
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases import accounts, oauth, users
from codeshot.usecases.accounts import NoUsername
from codeshot.usecases.erasure_start import window_seconds
from codeshot.usecases.threads import blocking

router = APIRouter(route_class=ConsoleRoute)


def _keys(services: Services, user: Principal, new_key: str | None = None,
          notice: str | None = None) -> str:
    has_account = services.users.get(user.user_id or "").identity is not None
    return templates.render("account/keys.html", keys=users.list_api_keys(services, user),
                            new_key=new_key, notice=notice, has_account=has_account,
                            once=ids.ulid())


def _grants(services: Services, user: Principal, notice: str | None = None) -> str:
    return templates.render("account/grants.html", grants=oauth.grants(services, user),
                            notice=notice)


def _account(services: Services, user: Principal) -> str:
    profile = users.profile(services, user)
    return templates.render("account/account.html", profile=profile, now=services.clock(),
                            keys=_keys(services, user), grants=_grants(services, user))


@router.get("/console/account", dependencies=[Depends(page_request)])
async def account(request: Request, user: Principal = Depends(caller)) -> HTMLResponse:
    return html(await blocking(_account, services_of(request), user))


@router.post("/console/account/keys")
async def create_key(request: Request, once: str | None = None,
                     user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    record, key = await blocking(users.create_api_key, services, user, once)
    return html(await blocking(_keys, services, user, key,
                               f"Created {record.key_id}. Copy the key now: it is shown once."))


@router.delete("/console/account/keys/{key_id}")
async def revoke_key(request: Request, key_id: str, user: Principal = Depends(caller)
                     ) -> HTMLResponse:
    services = services_of(request)
    revoked = await blocking(users.revoke_api_key, services, user, key_id)
    notice = f"Revoked {revoked.key_id}." + (
        " It was the key this browser signed in with: the next request will ask you to sign "
        "in with another key." if revoked.current else "")
    return html(await blocking(_keys, services, user, None, notice))


@router.delete("/console/account/grants/{owner}/{handle}")
async def revoke_grant(request: Request, owner: str, handle: str,
                       user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    agent_id = f"{owner}/{handle}"
    await blocking(oauth.revoke, services, user, agent_id)
    return html(await blocking(_grants, services, user,
                               f"Revoked {agent_id}'s token: it must ask you again."))


@router.post("/console/account/delete")
async def delete_account(request: Request, user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    confirm = (await form(request)).get("username", "")
    deleted = await blocking(accounts.delete_account, services, user, confirm)
    files_kept = not await blocking(services.sessions.replies_held)
    return html(templates.render("account/deleted.html", username=deleted.username,
                                 minutes=-(-window_seconds(services.settings) // 60),
                                 files_kept=files_kept))


@router.get("/console/signed-in")
async def signed_in(request: Request) -> HTMLResponse:
    """Who the credential belongs to (the header shows it, and to operators a link to the
    users; a sign-in checks it). An account with no username yet shows its email."""
    try:
        user = await caller(request)
    except NoUsername as exc:
        return html(templates.render("account/signed_in.html", username=exc.identity.email,
                                     operator=False))
    record = await blocking(services_of(request).users.get, user.user_id or "")
    return html(templates.render("account/signed_in.html", username=user.username,
                                 operator=record.operator))
