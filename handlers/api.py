"""Lambda entry point of the API: Mangum around the FastAPI app (API Gateway HTTP API)."""

from mangum import Mangum

from codeshot.api.app import create_app

handler = Mangum(create_app(), lifespan="off")
