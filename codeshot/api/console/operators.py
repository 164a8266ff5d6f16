"""The users page, for operators: every user with their daily query limit and state; an
operator sets a user's limit and disables or enables them (codeshot/usecases/accounts.py).
Anyone else gets FORBIDDEN."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from codeshot.api.console.web import (
    ConsoleRoute,
    caller,
    form,
    html,
    page_request,
    services_of,
    templates,
)
from codeshot.errors import InvalidInput
from codeshot.models import MAX_DAILY_LIMIT, Principal
from codeshot.services import Services
from codeshot.usecases import accounts, users
from codeshot.usecases.threads import blocking

router = APIRouter(route_class=ConsoleRoute)


def _table(services: Services, operator: Principal, after: str | None = None,
           notice: str | None = None) -> str:
    accounts.require_operator(services, operator)
    page = accounts.list_users(services, after)
    return templates.render("users/table.html", page=page, notice=notice,
                            default_limit=services.settings.daily_query_limit,
                            me=operator.username)


@router.get("/console/users", dependencies=[Depends(page_request)])
async def users_page(request: Request, after: str | None = None,
                     operator: Principal = Depends(caller)) -> HTMLResponse:
    table = await blocking(_table, services_of(request), operator, after)
    return html(templates.render("users/users.html", table=table))


@router.post("/console/users/{username}/limit")
async def set_limit(request: Request, username: str,
                    operator: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    await blocking(accounts.require_operator, services, operator)
    text = (await form(request)).get("daily_queries", "").strip()
    # ASCII digits only: "²".isdigit() holds, yet int("²") fails. Range: set_limits.
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(MAX_DAILY_LIMIT)):
        raise InvalidInput(f"the daily query limit is a whole number from 0 to {MAX_DAILY_LIMIT:,}")
    user = await blocking(users.set_limits, services, username, int(text))
    return html(await blocking(_table, services, operator, None,
                               f"{user.username} may now send {int(text):,} queries a day."))


@router.post("/console/users/{username}/{state}")
async def set_state(request: Request, username: str, state: str,
                    operator: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    await blocking(accounts.require_operator, services, operator)
    if state not in ("disable", "enable"):
        raise InvalidInput("a user is disabled or enabled")
    if username == operator.username:
        raise InvalidInput("you cannot disable yourself")
    user = await blocking(accounts.set_disabled, services, username, state == "disable")
    notice = f"{user.username} is disabled: every key and sign-in is refused." \
        if user.disabled else f"{user.username} is enabled again."
    return html(await blocking(_table, services, operator, None, notice))
