"""Agent pages: the gallery (published agents and the caller's own), an agent's page,
creating, editing, deleting and refreshing agents, and "which agent would answer this?".

An agent comes from a URL (the platform reads its handshake) or inline: a base prompt and
few-shots written in the form as one text, few-shots apart by a blank line. A grammar
error is shown on the line of that text it names, with everything typed kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from codeshot.errors import CodeshotError, NotFound
from codeshot.models import Agent, Principal
from codeshot.services import Services
from codeshot.usecases import agents, paging
from codeshot.usecases.threads import blocking

if TYPE_CHECKING:
    from codeshot.usecases.registration import AgentFields, AgentRegistration, FewShotText

router = APIRouter(route_class=ConsoleRoute)
TEXT_FIELDS = ("name", "description", "more_info_url", "query_url", "func_url")


def _registration(services: Services) -> AgentRegistration:
    # Registration (handshakes, the grammar, embeddings) is heavy to import: on use only.
    from codeshot.usecases.registration import AgentRegistration, daily_agent_change

    return AgentRegistration(services, charge=daily_agent_change)


def _gallery(services: Services, user: Principal, after: str | None = None
             ) -> dict[str, Any]:
    """All of the caller's agents, and a page of others' published ones (``more``: where
    the next page starts, if there is one)."""
    visible = agents.all_visible_agents(services, user)
    others = [a for a in visible if a.owner != user.username and
              (after is None or a.agent_id > after)]
    page = paging.AGENTS.of(None)
    return {"own": [a for a in visible if a.owner == user.username],
            "published": others[:page],
            "more": others[page - 1].agent_id if len(others) > page else None}


@router.get("/console/agents", dependencies=[Depends(page_request)])
async def gallery(request: Request, after: str | None = None,
                  user: Principal = Depends(caller)) -> HTMLResponse:
    view = await blocking(_gallery, services_of(request), user, after)
    return html(templates.render("agents/gallery.html", **view, notice=None))


@router.get("/console/route")
async def route(request: Request, text: str = "", user: Principal = Depends(caller)
                ) -> HTMLResponse:
    services = services_of(request)
    routes = await blocking(agents.route, services, user, text, 3)
    return html(templates.render("agents/routes.html", routes=routes, text=text))


@router.get("/console/agents/new", dependencies=[Depends(page_request)])
async def new_agent(request: Request, user: Principal = Depends(caller)) -> HTMLResponse:
    return _form_page(None, {})  # private until its owner publishes it


def _find(services: Services, user: Principal, owner: str, handle: str) -> Agent:
    return agents.usable_agent(services, user, Agent.make_id(owner, handle))


@router.get("/console/agents/{owner}/{handle}", dependencies=[Depends(page_request)])
async def agent_page(request: Request, owner: str, handle: str,
                     user: Principal = Depends(caller)) -> HTMLResponse:
    agent = await blocking(_find, services_of(request), user, owner, handle)
    return await _agent_page(request, agent, user)


async def _agent_page(request: Request, agent: Agent, user: Principal,
                      notice: str | None = None, headers: dict[str, str] | None = None
                      ) -> HTMLResponse:
    corpus = await blocking(agents.corpus_status, services_of(request), user, agent)
    return html(templates.render("agents/agent.html", agent=agent, notice=notice,
                                 mine=agent.owner == user.username, corpus=corpus),
                headers=headers)


@router.get("/console/agents/{owner}/{handle}/edit", dependencies=[Depends(page_request)])
async def edit_agent(request: Request, owner: str, handle: str,
                     user: Principal = Depends(caller)) -> HTMLResponse:
    agent = await blocking(_find, services_of(request), user, owner, handle)
    if agent.owner != user.username:
        raise NotFound(f"you have no agent {agent.agent_id}")
    values = {f: getattr(agent, f) or "" for f in TEXT_FIELDS}
    values |= {"published": "on" if agent.published else "", "base_prompt": agent.base_prompt,
               "few_shots": "\n\n".join(agent.few_shots)}
    return _form_page(agent, values)


def _form_page(agent: Agent | None, values: dict[str, str], error: CodeshotError | None = None,
               error_line: int | None = None, lines: list[str] | None = None) -> HTMLResponse:
    body = templates.render("agents/form.html", agent=agent, values=values, error=error,
                            error_line=error_line, lines=lines or [])
    return html(body, status=422 if error else 200)


def _fields(values: dict[str, str], agent: Agent | None, few_shots: FewShotText
            ) -> AgentFields:
    """The form as the registration's fields. On an edit, an unchanged program stays None,
    so an agent whose few-shots came from its handshake keeps reading them there."""
    from codeshot.usecases.registration import AgentFields, FewShotText

    texts: dict[str, str | None] = {f: values.get(f, "").strip() for f in TEXT_FIELDS}
    if agent is None:  # a new agent: empty means not given
        texts = {f: v or None for f, v in texts.items()}
    base_prompt = values.get("base_prompt", "").strip()
    unchanged = agent is not None and base_prompt == agent.base_prompt \
        and few_shots.few_shots == FewShotText.of("\n\n".join(agent.few_shots)).few_shots
    return AgentFields(name=texts["name"], description=texts["description"],
                       more_info_url=texts["more_info_url"], query_url=texts["query_url"],
                       func_url=texts["func_url"], published=values.get("published") == "on",
                       base_prompt=None if unchanged or not base_prompt else base_prompt,
                       few_shots=None if unchanged or not few_shots.few_shots
                       else few_shots.few_shots)


async def _save(request: Request, user: Principal, agent: Agent | None) -> HTMLResponse:
    from codeshot.usecases.registration import FewShotText

    services = services_of(request)
    values = await form(request)
    few_shots = FewShotText.of(values.get("few_shots", ""))
    registration = _registration(services)
    try:
        fields = _fields(values, agent, few_shots)
        if agent is None:
            saved = await blocking(registration.create, user, values.get("handle", "").strip(),
                                   fields)
        else:
            saved = await blocking(registration.update, user, agent.handle, fields,
                                   values.get("new_handle", "").strip() or None)
    except CodeshotError as exc:
        return _form_page(agent, values, exc, few_shots.line_of(exc), few_shots.lines)
    verb = "Created" if agent is None else "Saved"
    return await _agent_page(request, saved, user, notice=f"{verb} {saved.agent_id}.",
                             headers={"HX-Push-Url": f"/console/agents/{saved.agent_id}"})


@router.post("/console/agents")
async def create_agent(request: Request, user: Principal = Depends(caller)) -> HTMLResponse:
    return await _save(request, user, None)


@router.put("/console/agents/{owner}/{handle}")
async def update_agent(request: Request, owner: str, handle: str,
                       user: Principal = Depends(caller)) -> HTMLResponse:
    agent = await blocking(_find, services_of(request), user, owner, handle)
    if agent.owner != user.username:
        raise NotFound(f"you have no agent {agent.agent_id}")
    return await _save(request, user, agent)


@router.post("/console/agents/{owner}/{handle}/refresh")
async def refresh_agent(request: Request, owner: str, handle: str,
                        user: Principal = Depends(caller)) -> HTMLResponse:
    registration = _registration(services_of(request))
    agent = await blocking(registration.refresh, user, owner, handle)
    return await _agent_page(request, agent, user, notice="Read the agent's handshake again.")


@router.delete("/console/agents/{owner}/{handle}")
async def delete_agent(request: Request, owner: str, handle: str,
                       user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    deleted = await blocking(_registration(services).delete, user, owner, handle)
    view = await blocking(_gallery, services, user)
    return html(templates.render("agents/gallery.html", **view,
                                 notice=f"Deleted {deleted.agent_id}."),
                headers={"HX-Push-Url": "/console/agents"})
