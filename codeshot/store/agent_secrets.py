"""Secrets an agent's owner gives the platform to call the agent with (an MCP server's
Authorization header), in Secrets Manager: encrypted at rest, never returned by the API,
read only by the runner (and by registration, to read the server's tools again).

Each value gets a secret of its own, named ``{prefix}{agent_id}/{ulid}`` and kept on the
agent's record: a create that loses a race, or an update, never touches the secret that
the agent in place is using. IAM grants work on the prefix.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import TYPE_CHECKING

from codeshot import aws, ids
from codeshot.errors import NotFound
from codeshot.settings import Settings

if TYPE_CHECKING:
    from types_boto3_secretsmanager import SecretsManagerClient

# How long a warm runner reuses a secret it read (an owner's new value gets a new name).
CACHE_SECONDS = 300.0


class AgentSecrets:
    def __init__(self, settings: Settings, client: SecretsManagerClient | None = None) -> None:
        self.settings = settings
        self._client = client
        self._cache: dict[str, tuple[float, str]] = {}
        self._lock = threading.Lock()

    @property
    def client(self) -> SecretsManagerClient:
        if self._client is None:
            self._client = aws.client("secretsmanager", self.settings)
        return self._client

    def create(self, agent_id: str, value: str) -> str:
        """A new secret holding ``value``; its name."""
        name = f"{self.settings.agent_secrets_prefix}{agent_id}/{ids.ulid()}"
        self.client.create_secret(Name=name, SecretString=value,
                                  Description=f"codeshot: Authorization for agent {agent_id}")
        return name

    def get(self, name: str) -> str:
        with self._lock:
            cached = self._cache.get(name)
        if cached and time.monotonic() - cached[0] < CACHE_SECONDS:
            return cached[1]
        try:
            value = self.client.get_secret_value(SecretId=name)["SecretString"]
        except self.client.exceptions.ResourceNotFoundException:
            raise NotFound(f"the agent's secret {name} is gone") from None
        with self._lock:
            self._cache[name] = (time.monotonic(), value)
        return value

    def delete(self, name: str | None) -> None:
        """Delete at once (no recovery window: the agent that used it is gone or changed)."""
        if not name:
            return
        with contextlib.suppress(self.client.exceptions.ResourceNotFoundException):
            self.client.delete_secret(SecretId=name, ForceDeleteWithoutRecovery=True)
        with self._lock:
            self._cache.pop(name, None)
