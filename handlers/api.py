"""Lambda entry point of the API: Mangum around the FastAPI app (API Gateway HTTP API),
with Powertools' Logger and Tracer (built on the first request)."""

from codeshot.observability import lambda_handler, lambda_init

with lambda_init():
    from mangum import Mangum

    from codeshot.api.app import create_app

    handler = lambda_handler("codeshot-api")(Mangum(create_app(), lifespan="off"))
