"""``/graphql`` over HTTP: Strawberry's FastAPI router with the platform's JSON.

Responses are UTF-8 JSON; one that would pass Lambda's limit (see ``budget``) is an
INVALID_INPUT error instead.
"""

from __future__ import annotations

from strawberry.fastapi import GraphQLRouter

from codeshot.api.graphql import budget
from codeshot.errors import InvalidInput


class CodeshotGraphQLRouter(GraphQLRouter):
    def encode_json(self, data: object) -> str:
        # Measured before the text is made: twenty aliases of a page's text would be made
        # twenty times over.
        size = budget.lambda_size(data)
        if size > budget.RESPONSE_BYTES:
            data = {"data": None, "errors": [{"message": (
                f"the response would take {size:,} bytes, more than a response may "
                f"({budget.RESPONSE_BYTES:,}): ask for smaller pages (limit) or fewer fields"),
                "extensions": {"code": InvalidInput.code}}]}
        return budget.encode(data)
