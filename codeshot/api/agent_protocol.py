"""The Agent Protocol v1 (agentprotocol.ai) at ``/ap/v1/agent/...``: tasks, steps and
artifacts over sessions (:mod:`codeshot.usecases.agent_protocol`), an API key as the
bearer token. Bodies follow the protocol's OpenAPI document; a task also carries its
``status`` (the RFC's names: ``awaiting_input`` when its agent asked the user). Errors
carry the protocol's ``{"message"}`` next to codeshot's ``{"error": {"code", "message"}}``.
POST /tasks and POST /steps honour an ``Idempotency-Key`` header (a retry is answered
with the first task or step). An artifact downloads from S3: a 307 to a presigned URL.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, File, Form, Header, Request, Response, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict

from codeshot.api.errors import as_codeshot_error, rest_body
from codeshot.api.rest import api_user, get_services
from codeshot.errors import CodeshotError, InvalidInput
from codeshot.models import Message, MessageType, Principal, TaskState
from codeshot.services import Services
from codeshot.usecases import agent_protocol as ap
from codeshot.usecases.tasks import Turn

# A task's state in the RFC's words (A2A's names elsewhere).
TASK_STATUS = {TaskState.SUBMITTED: "created", TaskState.WORKING: "running",
               TaskState.INPUT_REQUIRED: "awaiting_input", TaskState.COMPLETED: "completed",
               TaskState.FAILED: "failed", TaskState.CANCELED: "canceled"}


class ProtocolRoute(APIRoute):
    """Errors in the protocol's shape (``message``) and codeshot's (``error``) at once."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()))
                return _error(InvalidInput(f"{where}: {first.get('msg', 'invalid request')}"))
            except Exception as exc:
                known = as_codeshot_error(exc)
                if known is None:
                    raise
                return _error(known)

        return handle


def _error(exc: CodeshotError) -> JSONResponse:
    return JSONResponse({"message": exc.message, **rest_body(exc)}, status_code=exc.http_status)


router = APIRouter(prefix="/ap/v1/agent", route_class=ProtocolRoute)


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | None = None
    additional_input: dict[str, Any] | None = None
    # The RFC's option 2: where the platform asks the user the agent's questions.
    callback_url: str | None = None


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | None = None
    additional_input: dict[str, Any] | None = None


# -- wire shapes ------------------------------------------------------------------------
def _when(value: datetime) -> str:
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def artifact_json(artifact: ap.Artifact) -> dict[str, Any]:
    return {"artifact_id": artifact.artifact_id, "agent_created": artifact.agent_created,
            "file_name": artifact.file_name, "relative_path": artifact.relative_path,
            "created_at": _when(artifact.created)}


def task_json(services: Services, task: ap.Task) -> dict[str, Any]:
    found = task.turns
    state = found[-1].state if found else TaskState.SUBMITTED
    return {"task_id": task.session.session_id, "input": task.input,
            "additional_input": {ap.AGENT: task.agent},
            "artifacts": [artifact_json(a) for a in ap.artifacts_of(services, task)],
            "status": TASK_STATUS[state], "created_at": _when(task.session.created),
            "modified_at": _when(task.session.modified)}


def _additional_output(reply: Message | None) -> dict[str, Any] | None:
    if reply is None:
        return None
    out: dict[str, Any] = {"type": reply.type.value, "sent_by": reply.sent_by}
    if reply.type is MessageType.AWAITING_INPUT:
        out.update(status=TASK_STATUS[TaskState.INPUT_REQUIRED], prompt=reply.text)
    elif reply.type is MessageType.ERROR:
        out["error"] = {"code": reply.error_code, "message": reply.text}
    return out


def step_json(turn: Turn) -> dict[str, Any]:
    reply = turn.reply
    return {"task_id": turn.query.session_id, "step_id": turn.query.message_id,
            "name": None, "input": turn.query.text, "additional_input": None,
            "status": ap.step_status(turn), "output": reply.text if reply else None,
            "additional_output": _additional_output(reply),
            "artifacts": [artifact_json(a) for a in ap.message_artifacts(reply)] if reply
            else [],
            "is_last": ap.is_last(turn), "created_at": _when(turn.query.timestamp),
            "modified_at": _when((reply or turn.query).timestamp)}


def pagination_json(page: ap.Page[Any]) -> dict[str, int]:
    return {"total_items": page.total_items, "total_pages": page.total_pages,
            "current_page": page.current_page, "page_size": page.page_size}


# -- routes -----------------------------------------------------------------------------
@router.post("/tasks")
def create_task(body: TaskRequest, user: Principal = Depends(api_user),
                services: Services = Depends(get_services),
                idempotency_key: str | None = Header(None)) -> dict[str, Any]:
    """A new task: a session with the planner, or the agent ``additional_input.agent``
    names; its input is its first step. With ``callback_url``, the agent's questions go
    there (:mod:`codeshot.usecases.prompts`)."""
    task = ap.create_task(services, user, body.input, body.additional_input,
                          callback_url=body.callback_url, idempotency_key=idempotency_key)
    return task_json(services, task)


@router.get("/tasks")
def list_tasks(current_page: int | None = None, page_size: int | None = None,
               user: Principal = Depends(api_user),
               services: Services = Depends(get_services)) -> dict[str, Any]:
    page = ap.list_tasks(services, user, current_page, page_size)
    return {"tasks": [task_json(services, t) for t in page.items],
            "pagination": pagination_json(page)}


@router.get("/tasks/{task_id}")
def get_task(task_id: str, user: Principal = Depends(api_user),
             services: Services = Depends(get_services)) -> dict[str, Any]:
    return task_json(services, ap.get_task(services, user, task_id))


@router.post("/tasks/{task_id}/steps")
async def execute_step(task_id: str, body: StepRequest | None = None,
                       user: Principal = Depends(api_user),
                       services: Services = Depends(get_services),
                       idempotency_key: str | None = Header(None)) -> dict[str, Any]:
    """The task's next step: ``input`` posted and its reply awaited (the reply wait at
    most: a step still ``running`` is read again with GET); without input, the step the
    task is working on."""
    body = body or StepRequest()
    turn = await ap.execute_step(services, user, task_id, body.input, body.additional_input,
                                 idempotency_key)
    return step_json(turn)


@router.get("/tasks/{task_id}/steps")
def list_steps(task_id: str, current_page: int | None = None, page_size: int | None = None,
               user: Principal = Depends(api_user),
               services: Services = Depends(get_services)) -> dict[str, Any]:
    page = ap.list_steps(services, user, task_id, current_page, page_size)
    return {"steps": [step_json(t) for t in page.items], "pagination": pagination_json(page)}


@router.get("/tasks/{task_id}/steps/{step_id}")
def get_step(task_id: str, step_id: str, user: Principal = Depends(api_user),
             services: Services = Depends(get_services)) -> dict[str, Any]:
    return step_json(ap.get_step(services, user, task_id, step_id))


@router.get("/tasks/{task_id}/artifacts")
def list_artifacts(task_id: str, current_page: int | None = None,
                   page_size: int | None = None, user: Principal = Depends(api_user),
                   services: Services = Depends(get_services)) -> dict[str, Any]:
    page = ap.list_artifacts(services, user, task_id, current_page, page_size)
    return {"artifacts": [artifact_json(a) for a in page.items],
            "pagination": pagination_json(page)}


@router.post("/tasks/{task_id}/artifacts")
def upload_artifact(task_id: str, file: UploadFile = File(...),
                    relative_path: str | None = Form(None), user: Principal = Depends(api_user),
                    services: Services = Depends(get_services)) -> dict[str, Any]:
    """A file for the task's agents (a session embed, named by the file's name)."""
    if not file.filename:
        raise InvalidInput("the uploaded file needs a file name")
    artifact = ap.upload_artifact(services, user, task_id, file.filename, file.file.read(),
                                  file.content_type, relative_path)
    return artifact_json(artifact)


@router.get("/tasks/{task_id}/artifacts/{artifact_id}")
def download_artifact(task_id: str, artifact_id: str, user: Principal = Depends(api_user),
                      services: Services = Depends(get_services)) -> Response:
    """A 307 to the artifact's bytes on S3 (a presigned URL: no size limit of the API's
    responses), always a download of its file name, never rendered."""
    artifact = ap.get_artifact(services, user, task_id, artifact_id)
    return RedirectResponse(services.embeds.get_url(artifact.ref.content_hash,
                                                    download_as=artifact.file_name),
                            status_code=307)
