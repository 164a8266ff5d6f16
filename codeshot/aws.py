"""boto3 clients, made once per process and shared (boto3 clients are thread-safe).

Locally ``CODESHOT_AWS_ENDPOINT_URL`` points every client at moto's server; there the
credentials are placeholders so a developer needs no AWS account.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, overload

from codeshot.settings import Settings

if TYPE_CHECKING:  # the stubs are a dev dependency (types-boto3); nothing imports them at run time
    from types_boto3_bedrock_runtime import BedrockRuntimeClient
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_s3 import S3Client
    from types_boto3_secretsmanager import SecretsManagerClient
    from types_boto3_sqs import SQSClient

_lock = threading.Lock()
# (service, operation) observers of every AWS call this process makes: how benchmarks
# count round-trips per query through botocore's own event hooks.
_listeners: list[Callable[[str, str], None]] = []


def on_call(listener: Callable[[str, str], None]) -> Callable[[], None]:
    """Observe every AWS API call made through these clients; returns an unsubscribe."""
    _listeners.append(listener)
    return lambda: _listeners.remove(listener)


def _notify(model: Any = None, **_: Any) -> None:
    for listener in _listeners:
        listener(model.service_model.service_name, model.name)


@lru_cache(maxsize=1)
def _session() -> Any:
    """One boto3 session for every client: each new session registers botocore's handlers
    and re-reads its endpoint and retry data (tens of ms per client on a cold start)."""
    import boto3

    return boto3.session.Session()


READ_TIMEOUT = 20  # seconds a client waits for a read


@lru_cache(maxsize=64)
def _client(service: str, region: str, endpoint_url: str | None,
            read_timeout: int = READ_TIMEOUT, attempts: int = 4) -> Any:
    from botocore.config import Config

    config = Config(
        region_name=region,
        retries={"mode": "standard", "total_max_attempts": attempts},  # 4: 1 try + 3 retries
        connect_timeout=min(3, read_timeout),
        read_timeout=read_timeout,
        s3={"addressing_style": "path"} if endpoint_url else None,
        signature_version="s3v4" if service == "s3" else None,
    )
    extra: dict[str, Any] = {}
    if endpoint_url:
        extra = {"aws_access_key_id": "codeshot-local", "aws_secret_access_key": "codeshot-local"}
    # A boto3 session is not thread-safe to create clients from; serialise that.
    with _lock:
        made: Any = _session().client(  # service: any name
            service, endpoint_url=endpoint_url, config=config, **extra
        )
    made.meta.events.register("before-call", _notify)
    return made


@overload
def client(service: Literal["dynamodb"], settings: Settings) -> DynamoDBClient: ...
@overload
def client(service: Literal["s3"], settings: Settings) -> S3Client: ...
@overload
def client(service: Literal["sqs"], settings: Settings) -> SQSClient: ...
@overload
def client(service: Literal["secretsmanager"], settings: Settings) -> SecretsManagerClient: ...
@overload
def client(service: Literal["bedrock-runtime"], settings: Settings) -> BedrockRuntimeClient: ...
@overload  # no stubs for S3 Vectors or CloudFormation in types-boto3's extras here
def client(service: Literal["s3vectors", "cloudformation"], settings: Settings) -> Any: ...
def client(service: str, settings: Settings) -> Any:
    """The shared client of ``service`` for these settings (typed per service for mypy)."""
    return _client(service, settings.region, settings.aws_endpoint_url)


def bedrock_client(settings: Settings, read_timeout: int) -> BedrockRuntimeClient:
    """Bedrock Runtime waiting at most ``read_timeout`` seconds for a read and
    trying a request once: an LLM call held to a query's deadline retries within it."""
    made: BedrockRuntimeClient = _client("bedrock-runtime", settings.region,
                                         settings.aws_endpoint_url, read_timeout, 1)
    return made
