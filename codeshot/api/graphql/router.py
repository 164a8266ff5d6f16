"""``/graphql`` over HTTP: Strawberry's FastAPI router with the platform's JSON and errors.

Responses are UTF-8 JSON; one that would pass Lambda's limit (see ``budget``) is an
INVALID_INPUT error instead.
A request that is not GraphQL at all (a body that is not JSON or not shaped as a GraphQL
request, a malformed multipart form, another content type or method) answers its HTTP
status with the REST error body, as a body over the size limit does, never Strawberry's
plain text; a multipart form's ``operations`` and ``map`` are checked before they are
used (a map path through a null variable, or a map that is a list, was a 500).
"""

from __future__ import annotations

import json
from typing import Any

from cross_web import AsyncHTTPRequestAdapter, HTTPException
from fastapi.responses import JSONResponse
from starlette.datastructures import UploadFile
from strawberry.fastapi import GraphQLRouter
from strawberry.file_uploads.utils import replace_placeholders_with_files
from strawberry.types.unset import UNSET

from codeshot.api.errors import rest_body
from codeshot.api.graphql import budget
from codeshot.errors import InvalidInput, NotFound


class CodeshotGraphQLRouter(GraphQLRouter):
    def encode_json(self, data: object) -> str:
        # Measured before the text is made: twenty aliases of a page's text would be made
        # twenty times over.
        size = budget.lambda_size(data)
        if size > budget.RESPONSE_BYTES:
            data = {"data": None, "errors": [{"message": (
                f"the response would take {size:,} bytes, more than a response may "
                f"({budget.RESPONSE_BYTES:,}): ask for smaller pages (limit) or fewer fields; "
                "a mutation in the request has run all the same"),
                "extensions": {"code": InvalidInput.code}}]}
        return budget.encode(data)

    async def run(self, request: Any, context: Any = UNSET, root_value: Any = UNSET) -> Any:
        try:
            return await super().run(request, context, root_value)
        except HTTPException as exc:
            error = (NotFound if exc.status_code == 404 else InvalidInput)(exc.reason)
            return JSONResponse(rest_body(error), status_code=exc.status_code)

    async def parse_multipart(self, request: AsyncHTTPRequestAdapter) -> dict[str, Any]:
        try:
            form = (await request.get_form_data()).form
        except ValueError as exc:
            raise HTTPException(400, "the multipart body cannot be read") from exc
        operations = _form_json(form, "operations")
        files_map = _form_json(form, "map")
        for name, paths in files_map.items():
            if not (isinstance(paths, list) and all(isinstance(p, str) for p in paths)):
                raise HTTPException(400, f"map[{name!r}] must be a list of paths")
            if not isinstance(form.get(name), UploadFile):
                raise HTTPException(400, f"map names no file part of the form: {name!r}")
        try:
            return replace_placeholders_with_files(operations, files_map, form)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise HTTPException(400, "a path in map does not lead to a value in operations "
                                     "(such as variables.file)") from exc


def _form_json(form: Any, name: str) -> dict[str, Any]:
    """The form field ``name``, a JSON object (a multipart GraphQL request's
    ``operations`` and ``map``; batches are not taken)."""
    try:
        value = json.loads(form.get(name, "{}"))
    except (TypeError, ValueError):  # not text (a file), or not JSON
        value = None
    if not isinstance(value, dict):
        raise HTTPException(400, f"the form field {name!r} must be a JSON object")
    return value
