"""Every ``CODESHOT_*`` setting, typed, in one place.

Lambda functions get these from CDK, the local stack from its environment; both use the
same names. Read them through :func:`get_settings` (cached per process) or inject a
:class:`Settings` built by hand in tests.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# The Fixie 1.0 SDK hard-codes these audiences; tokens for its agents must carry one.
FIXIE_AUDIENCES = ("https://app.fixie.ai/api", "https://app.dev.fixie.ai/api")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="CODESHOT_", extra="ignore", frozen=True, populate_by_name=True
    )

    # AWS
    region: str = Field(
        "us-east-1",
        validation_alias=AliasChoices("CODESHOT_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"),
    )
    aws_endpoint_url: str | None = None  # moto's server locally; unset in AWS
    registry_table: str = "codeshot-registry"
    sessions_table: str = "codeshot-sessions"
    user_storage_table: str = "codeshot-user-storage"
    usage_table: str = "codeshot-usage"
    users_table: str = "codeshot-users"
    embeds_bucket: str = "codeshot-embeds"
    queue_name: str = "codeshot-sessions.fifo"  # local stack and tests create it
    queue_url: str | None = None  # set by CDK in AWS, by the local stack locally
    signing_secret_id: str = "codeshot/signing-keys"

    # Where agents and clients reach the platform; also the JWT issuer.
    api_url: str = Field(
        "http://127.0.0.1:8080",
        validation_alias=AliasChoices("CODESHOT_API_URL", "FIXIE_API_URL"),
    )
    # Client side (`codeshot chat`): the user's API key.
    api_key: str | None = Field(
        None, validation_alias=AliasChoices("CODESHOT_API_KEY", "FIXIE_API_KEY")
    )
    # Agent side: when set, an agent accepts only tokens minted for this agent id.
    agent_id: str | None = Field(
        None, validation_alias=AliasChoices("CODESHOT_AGENT_ID", "FIXIE_ALLOWED_AGENT_ID")
    )

    # LLM and routing
    llm: Literal["bedrock", "openai", "fewshot"] = "fewshot"
    llm_model: str = "anthropic.claude-3-5-haiku-20241022-v1:0"
    openai_base_url: str = "http://127.0.0.1:11434/v1"
    openai_api_key: str | None = None
    embedder: Literal["hashing", "minilm", "bedrock"] = "hashing"
    # "route": the planner hands each query to the best agent; "plan": the LLM plans
    # across agents; "auto": route with the offline fewshot provider, else plan.
    planner_mode: Literal["auto", "route", "plan"] = "auto"
    embedding_model: str = "amazon.titan-embed-text-v2:0"

    # Limits
    daily_query_limit: int = Field(1000, ge=0)
    storage_rate_limit: int = Field(600, ge=1, description="user-storage calls per minute")
    max_message_length: int = Field(16_000, ge=1)
    max_storage_value_bytes: int = Field(100_000, ge=1, le=350_000)
    max_inline_embed_bytes: int = Field(256 * 1024, ge=1)
    max_embed_bytes: int = Field(10 * 1024 * 1024, ge=1)
    embed_url_ttl_seconds: int = Field(900, ge=1, le=7 * 24 * 3600)
    reply_wait_seconds: float = Field(25.0, ge=0)
    agent_token_ttl_seconds: int = Field(300, ge=1, le=300)
    agent_call_timeout_seconds: float = Field(30.0, gt=0)
    # How long a warm runner reuses an agent's registry record (0: read it every time).
    agent_cache_seconds: float = Field(5.0, ge=0)

    # Tokens for agents also carry the Fixie SDK's audiences (FIXIE_COMPAT.md).
    fixie_audiences: bool = True
    # Local runs may register agents on loopback addresses; AWS never does.
    local_mode: bool = False

    def token_audiences(self) -> list[str]:
        audiences = [self.api_url.rstrip("/")]
        if self.fixie_audiences:
            audiences.extend(FIXIE_AUDIENCES)
        return audiences


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
