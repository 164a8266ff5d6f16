"""Shared fixtures: settings isolated from the developer's environment, moto in-process
for unit tests, and moto's real server over HTTP for end-to-end tests."""

from __future__ import annotations

import os
import socket

import pytest

from codeshot.settings import Settings

# No test may reach real AWS, whatever the developer's shell holds.
for _name in list(os.environ):
    if _name.startswith(("CODESHOT_", "FIXIE_", "AWS_")):
        del os.environ[_name]
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def settings() -> Settings:
    return Settings(region="us-east-1")


@pytest.fixture
def aws(settings: Settings):
    """moto in-process with every codeshot resource created; yields the settings."""
    from moto import mock_aws

    from codeshot.local.aws_server import make_dynamodb_writes_atomic
    from codeshot.store.provision import create_all

    make_dynamodb_writes_atomic()
    with mock_aws():
        yield create_all(settings)


@pytest.fixture(scope="session")
def moto_server():
    """moto's server on loopback, shared by the end-to-end tests of one run."""
    from codeshot.local.aws_server import LocalAWS

    server = LocalAWS("127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server_aws(moto_server, request):
    """Fresh resources on the moto server (unique names per test); yields settings."""
    from codeshot.store.provision import create_all

    suffix = f"t{free_port()}"
    settings = Settings(
        region="us-east-1",
        aws_endpoint_url=moto_server.endpoint_url,
        registry_table=f"registry-{suffix}",
        sessions_table=f"sessions-{suffix}",
        user_storage_table=f"user-storage-{suffix}",
        usage_table=f"usage-{suffix}",
        users_table=f"users-{suffix}",
        embeds_bucket=f"embeds-{suffix}",
        signing_secret_id=f"codeshot/signing-{suffix}",
        queue_name=f"sessions-{suffix}.fifo",
    )
    return create_all(settings)
