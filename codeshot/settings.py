"""Every ``CODESHOT_*`` setting, typed, in one place.

Lambda functions get these from CDK, the local stack from its environment; both use the
same names. Read them through :func:`get_settings` (cached per process) or build one by
hand in tests: ``Settings(llm="openai")`` is the environment with that one field changed.

A frozen dataclass read by ~40 lines here rather than a pydantic-settings model: every
field is a scalar, and pydantic-settings (with the schema build and annotated-types it
pulls in) cost ~100 ms of every cold start (benchmarks/cold_start.py).
"""

from __future__ import annotations

import dataclasses
import operator
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from codeshot.errors import InvalidInput
from codeshot.models import MAX_DAILY_LIMIT, MAX_INT

ENV_PREFIX = "CODESHOT_"

# What a queued record needs beyond the time its work may take (a query's
# ``query_time_budget_seconds``): the writes of its reply. The runner starts no record with
# less than both left of its invocation (codeshot/runner/batch.py), so the budget plus
# this must fit the runner's timeout, twice (the CDK app refuses a budget that does not).
RUNNER_RECORD_MARGIN_SECONDS = 10
# The most an outside call an API request waits on may take (an MCP server described at
# registration, an agent's OAuth token request), whatever the agent-call timeout: API
# Gateway ends a request at 29 s, with a bare 500 instead of TIMEOUT.
API_CALL_SECONDS = 20.0
# One corpus ingestion's time in all (a session-queue record too, whatever the budget).
CORPUS_INGEST_SECONDS = 120.0


def runner_record_seconds(query_time_budget_seconds: float) -> float:
    """The longest one session-queue record may take: a query, or a corpus ingestion."""
    return max(query_time_budget_seconds, CORPUS_INGEST_SECONDS)


# The Fixie 1.0 SDK hard-codes these audiences; tokens for its agents must carry one.
FIXIE_AUDIENCES = ("https://app.fixie.ai/api", "https://app.dev.fixie.ai/api")

# The words pydantic accepts for booleans, so values that worked before still do.
_TRUE = {"1", "true", "t", "yes", "y", "on"}
_FALSE = {"0", "false", "f", "no", "n", "off"}
_KINDS: dict[str, type[Any]] = {"str": str, "int": int, "float": float, "bool": bool}


class SettingsError(InvalidInput):
    """A setting has a value it cannot take; the message names the variable."""


def setting(default: Any, *, env: tuple[str, ...] = (), choices: tuple[str, ...] = (),
            ge: float | None = None, le: float | None = None, gt: float | None = None) -> Any:
    """A field with where it is read from (default CODESHOT_<NAME>) and what it accepts."""
    meta = {"env": env, "choices": choices, "ge": ge, "le": le, "gt": gt}
    return dataclasses.field(default=default, metadata=meta)


MINILM_TUNING_FILE = "codeshot-tuning.json"  # beside a tuned router model (routing/tune.py)
MINILM_ONNX_FILE = "model.onnx"  # the tuned transformer, as onnxruntime runs it
MINILM_VOCAB_FILE = "vocab.txt"  # its WordPiece vocabulary


def s3_location(url: str) -> tuple[str, str] | None:
    """(bucket, key) of ``s3://bucket/key``, else None."""
    bucket, _, key = url.removeprefix("s3://").partition("/")
    return (bucket, key) if url.startswith("s3://") and bucket and key else None


@dataclasses.dataclass(frozen=True, init=False)
class Settings:
    # AWS
    region: str = setting(
        "us-east-1", env=("CODESHOT_REGION", "AWS_REGION", "AWS_DEFAULT_REGION")
    )
    aws_endpoint_url: str | None = None  # moto's server locally; unset in AWS
    registry_table: str = "codeshot-registry"
    sessions_table: str = "codeshot-sessions"
    user_storage_table: str = "codeshot-user-storage"
    usage_table: str = "codeshot-usage"
    users_table: str = "codeshot-users"
    corpora_table: str = "codeshot-corpora"
    oauth_table: str = "codeshot-oauth"  # OAuth flows in progress and users' agent tokens
    embeds_bucket: str = "codeshot-embeds"
    queue_name: str = "codeshot-sessions.fifo"  # local stack and tests create it
    queue_url: str | None = None  # set by CDK in AWS, by the local stack locally
    # The Agent Protocol's callback polls: a standard queue (a FIFO one has no per-message
    # delays), read by the runner too.
    prompt_queue_name: str = "codeshot-prompts"
    prompt_queue_url: str | None = None
    # Deleted users' erasure, a part a message (standard: the first part is delayed past
    # every credential the user held), read by the eraser function alone.
    erasure_queue_name: str = "codeshot-erasure"
    erasure_queue_url: str | None = None
    signing_secret_id: str = "codeshot/signing-keys"  # noqa: S105 - the secret's name
    # The seed of the key that encrypts users' OAuth tokens for agents (codeshot/store/oauth.py).
    oauth_key_secret_id: str = "codeshot/oauth-token-key"  # noqa: S105 - the secret's name
    # Where secrets that agents' owners give (an MCP server's Authorization) are kept.
    agent_secrets_prefix: str = "codeshot/agent-auth/"
    # Accounts (codeshot/auth/cognito.py): the Cognito user pool and its app client the
    # console signs users up and in with; unset: API keys are the only way in.
    user_pool_id: str | None = None
    user_pool_client_id: str | None = None
    # The owner of the kit's deployed agents (CDK's codeshot:adminUsername): its own
    # deleteAccount is refused (its agents would go, and every later deploy fail).
    deploy_owner: str = "admin"
    # Google and GitHub sign-in go through the pool's hosted pages at this base URL
    # (https://<prefix>.auth.<region>.amazoncognito.com), for the providers named here
    # (comma-separated, as the pool names them: "Google,GitHub"); both set by CDK.
    user_pool_domain: str | None = None
    user_pool_providers: str | None = None

    # Where agents and clients reach the platform; also the JWT issuer.
    api_url: str = setting("http://127.0.0.1:8080", env=("CODESHOT_API_URL", "FIXIE_API_URL"))
    # Client side (`codeshot chat`): the user's API key.
    api_key: str | None = setting(None, env=("CODESHOT_API_KEY", "FIXIE_API_KEY"))
    # Agent side: when set, an agent accepts only tokens minted for this agent id.
    agent_id: str | None = setting(None, env=("CODESHOT_AGENT_ID", "FIXIE_ALLOWED_AGENT_ID"))

    # LLM and routing
    llm: str = setting("fewshot", choices=("bedrock", "openai", "fewshot"))
    llm_model: str = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    openai_base_url: str = "http://127.0.0.1:11434/v1"
    openai_api_key: str | None = None
    # /chat/completions, or /completions for base models (one prompt, no chat template)
    openai_endpoint: str = setting("chat", choices=("chat", "completions"))
    # Seconds one call to the openai provider may take (a small model on a busy CPU is slow).
    llm_timeout_seconds: float = setting(60.0, gt=0)
    # Tokens one LLM call may generate in a query's run: a step or an answer needs far
    # fewer; a runaway (a model repeating itself to the server's cap) ends early.
    llm_max_tokens_per_call: int = setting(256, ge=16, le=8192)
    # Models an agent's llm_settings may choose (comma-separated); any other runs on
    # llm_model: the platform pays for the calls, so the agent does not pick the price.
    agent_llm_models: str | None = None
    embedder: str = setting("static", choices=("static", "hashing", "minilm", "bedrock"))
    # "route": the planner hands each query to the best agent; "plan": the LLM plans
    # across agents; "auto": plan compound queries (two agents fit, "and"/"then") and
    # queries no agent fits, route the rest (always route with the offline fewshot).
    planner_mode: str = setting("auto", choices=("auto", "route", "plan"))
    planner_top_k: int = setting(3, ge=1, le=10)  # agents the router offers the planner
    embedding_model: str = "amazon.titan-embed-text-v2:0"
    # A model `codeshot router tune` made (a directory): the minilm embedder loads it.
    minilm_model: str | None = None
    # Where that model's graph is when it is not in the directory: s3://bucket/key, read
    # into the temporary directory at the first route (a deployed platform's functions:
    # codeshot:routerModel; 90 MB in each bundle would not fit Lambda's 250 MB).
    minilm_graph: str | None = None
    # What document corpora embed with; unset: the router's embedder, untuned (a deployed
    # platform routing with a tuned model keeps its corpora on codeshot:embedder).
    corpus_embedder: str | None = setting(None, choices=("static", "hashing", "minilm",
                                                         "bedrock"))
    # Below this router score no agent fits; unset: the floor calibrated for the embedder.
    router_floor: float | None = setting(None, ge=0, le=1)
    # How much nearer a no-agent example than an agent's samples a query may be and still
    # fit the agent; unset: the embedder's calibrated margin (or none if the floor is set).
    router_margin: float | None = setting(None, ge=-1, le=1)

    # Limits. Daily limits, and the sizes of what the API lists (embeds, corpora), are at
    # most GraphQL's Int (MAX_INT): a profile showing 5,000,000,000 failed as INTERNAL.
    daily_query_limit: int = setting(1000, ge=0, le=MAX_DAILY_LIMIT)
    # sessions a user may create per day
    daily_session_limit: int = setting(500, ge=0, le=MAX_DAILY_LIMIT)
    # Agent registrations, updates, refreshes and revision changes a user may make per
    # day: each reads a handshake (or an MCP server) and makes every runner reload the
    # registry.
    daily_agent_changes: int = setting(500, ge=0, le=MAX_DAILY_LIMIT)
    daily_upload_bytes: int = setting(1024**3, ge=0)  # embed bytes a user may upload per day
    # LLM tokens (prompt + completion) per day: a user's across agents (operators may set
    # one user's own), an agent's across users (the planner is agent platform/planner).
    daily_token_limit: int = setting(200_000, ge=0, le=MAX_DAILY_LIMIT)
    agent_daily_token_limit: int = setting(2_000_000, ge=0, le=MAX_DAILY_LIMIT)
    storage_rate_limit: int = setting(600, ge=1)  # user-storage calls per minute
    # Document corpora (an agent's declared URLs): pages fetched per ingestion (links
    # followed within a URL's prefix), bytes one document and all of them may have. The
    # default embedder embeds 4 MiB of text in ~51 s (12.8 s/MB): within the minute an
    # ingestion has left for embedding (codeshot/runner/corpora.py).
    corpus_max_pages: int = setting(50, ge=1, le=1000)
    corpus_max_document_bytes: int = setting(4 * 1024 * 1024, ge=1, le=MAX_INT)
    corpus_max_bytes: int = setting(4 * 1024 * 1024, ge=1, le=MAX_INT)
    # Where fixie_query_corpus searches: "lambda" (the index from S3, in the runner) or
    # "s3vectors" (an S3 Vectors index; the CDK app makes its bucket with this setting).
    corpus_search: str = setting("lambda", choices=("lambda", "s3vectors"))
    corpus_vector_bucket: str = "codeshot-corpus-vectors"
    # Fairness: one user's queries running at once (more are refused, RATE_LIMITED), and
    # the time one query may take in all, below the runner's timeout (TIMEOUT after it).
    max_running_queries: int = setting(4, ge=1)
    # Requests of one user held open waiting for a reply (an API Lambda instance each):
    # one more is refused, RATE_LIMITED, before it writes anything (usecases/waits.py).
    max_waiting_requests: int = setting(2, ge=1)
    query_time_budget_seconds: float = setting(120.0, gt=0, le=600)
    # The OpenAI proxy for agents (/api/openai-proxy/v1): calls per minute per user and
    # agent, and the tokens one call may generate (a request's max_tokens only lowers it).
    openai_proxy_rate_limit: int = setting(60, ge=1)
    openai_proxy_max_tokens: int = setting(1024, ge=16, le=8192)
    max_message_length: int = setting(16_000, ge=1)
    max_storage_value_bytes: int = setting(100_000, ge=1, le=350_000)
    max_storage_keys: int = setting(1000, ge=1)  # keys an agent keeps for one user
    max_inline_embed_bytes: int = setting(256 * 1024, ge=1)
    max_embed_bytes: int = setting(10 * 1024 * 1024, ge=1, le=MAX_INT)
    # Bytes of embeds one query's agents may return in all (each fetched or decoded, then
    # stored on S3): past it, the reply that crosses it is refused (AGENT_ERROR).
    max_query_embed_bytes: int = setting(50 * 1024 * 1024, ge=1)
    embed_url_ttl_seconds: int = setting(900, ge=1, le=7 * 24 * 3600)
    reply_wait_seconds: float = setting(25.0, ge=0)
    # Days a session's items (the session, its messages and steps, embeds, paused program)
    # are kept after they were last written; DynamoDB's TTL then deletes them. 0: forever.
    session_ttl_days: int = setting(90, ge=0, le=3650)
    # An Agent Protocol task's callback_url (RFC option 2): how long the platform polls it
    # for the answer to an agent's question, and the longest pause between two polls (the
    # pauses double from 1 s; SQS delays a message 900 s at most).
    prompt_deadline_seconds: int = setting(3600, ge=1, le=14 * 24 * 3600)
    prompt_poll_max_seconds: int = setting(60, ge=1, le=900)
    agent_token_ttl_seconds: int = setting(300, ge=1, le=300)
    agent_call_timeout_seconds: float = setting(30.0, gt=0)
    # How long a user has to authorize an agent at its OAuth provider (the state's life).
    oauth_state_seconds: int = setting(600, ge=60, le=3600)
    # How long a warm API reuses an API key's user record (revocation, limits), and a
    # user's state (deleted, disabled) for agents' call tokens (the runner: for queries); a
    # key is still verified by its signature on every request (0: read the user every time).
    api_key_cache_seconds: float = setting(30.0, ge=0)

    # GraphQL: storage reads one request may make (see codeshot/api/graphql/cost.py), and
    # whether the schema can be introspected (and GraphiQL served); the CDK app turns it off.
    graphql_max_cost: int = setting(500, ge=1)
    graphql_introspection: bool = True
    # MCP server (/mcp): besides ask and find_agents, one tool per agent the caller may use,
    # for up to this many agents (0: none; find_agents keeps a client's tool list short).
    mcp_agent_tools: int = setting(0, ge=0, le=200)

    # Tokens for agents also carry the Fixie SDK's audiences (docs/fixie-wire-contract.md).
    fixie_audiences: bool = True
    # Local runs may register agents on loopback addresses; AWS never does.
    local_mode: bool = False

    def __init__(self, **overrides: Any) -> None:
        unknown = set(overrides) - {f.name for f in FIELDS}
        if unknown:
            raise SettingsError(f"unknown settings: {', '.join(sorted(unknown))}")
        # Exact names first, then any case (codeshot_llm=...), as pydantic-settings read them.
        environ = {k.upper(): (k, v) for k, v in os.environ.items()} | {
            k: (k, v) for k, v in os.environ.items()}
        for field in FIELDS:
            if field.name in overrides:
                value = _check(field, overrides[field.name], field.name)
            else:
                found = next((environ[v] for v in env_names(field) if v in environ), None)
                value = field.default if found is None else _check(field, found[1], found[0])
            object.__setattr__(self, field.name, value)
        self._check_minilm_model()

    def _check_minilm_model(self) -> None:
        """A tuned router model is read at the first route: a wrong path fails here, at
        startup, and only where minilm routes (tuning the model it names must work)."""
        if self.minilm_model == "":
            object.__setattr__(self, "minilm_model", None)
        if self.embedder != "minilm" or self.minilm_model is None:
            return
        if self.minilm_graph is not None and s3_location(self.minilm_graph) is None:
            raise SettingsError(f"CODESHOT_MINILM_GRAPH={self.minilm_graph!r}: expected "
                                "s3://bucket/key")
        expected = (MINILM_VOCAB_FILE,) if self.minilm_graph else (MINILM_ONNX_FILE,
                                                                    MINILM_VOCAB_FILE)
        try:
            tuned = Path(self.minilm_model, MINILM_TUNING_FILE).is_file()
            missing = [name for name in expected if not Path(self.minilm_model, name).is_file()]
        except OSError as exc:  # not readable by this user
            raise SettingsError(f"CODESHOT_MINILM_MODEL={self.minilm_model!r}: {exc}") from None
        if not tuned:
            raise SettingsError(f"CODESHOT_MINILM_MODEL={self.minilm_model!r}: not a "
                                f"directory holding {MINILM_TUNING_FILE} (`codeshot router "
                                f"tune --out` makes one)")
        if missing:  # tuned by a release that did not export the graph
            raise SettingsError(f"CODESHOT_MINILM_MODEL={self.minilm_model!r}: no "
                                f"{' or '.join(missing)} beside {MINILM_TUNING_FILE}: tune "
                                f"it again with `codeshot router tune --out`")

    def replace(self, **changes: Any) -> Settings:
        """A copy with these fields changed (checked like any other value)."""
        return Settings(**{f.name: getattr(self, f.name) for f in FIELDS} | changes)

    def agent_models(self) -> frozenset[str]:
        return model_list(self.agent_llm_models)

    def token_audiences(self) -> list[str]:
        audiences = [self.api_url.rstrip("/")]
        if self.fixie_audiences:
            audiences.extend(FIXIE_AUDIENCES)
        return audiences


FIELDS = dataclasses.fields(Settings)
# Each field's type, from its annotation; a type this reader cannot parse fails at import.
_KIND_OF = {f.name: _KINDS[str(f.type).removesuffix(" | None")] for f in FIELDS}
_OPTIONAL = {f.name for f in FIELDS if str(f.type).endswith(" | None")}


def env_names(field: dataclasses.Field[Any]) -> tuple[str, ...]:
    """The variables a field is read from, first found wins."""
    return field.metadata.get("env") or (ENV_PREFIX + field.name.upper(),)


def field_named(name: str) -> dataclasses.Field[Any]:
    for field in FIELDS:
        if field.name == name:
            return field
    raise KeyError(f"codeshot.settings.Settings has no field {name!r}")


def check_setting(name: str, value: Any) -> Any:
    """``value`` as field ``name`` takes it (text parsed, choices and bounds checked), or
    SettingsError naming its variable: what the CDK app checks ``codeshot:extraEnv`` with."""
    field = field_named(name)
    return _check(field, value, env_names(field)[0])


def _check(field: dataclasses.Field[Any], value: Any, source: str) -> Any:
    kind = _KIND_OF[field.name]
    meta, given = field.metadata, value
    if value is None and field.name in _OPTIONAL:
        return None
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        if kind is bool and text in _TRUE | _FALSE:
            value = text in _TRUE
        elif kind in (int, float):
            try:
                value = kind(text)
            except ValueError:
                raise SettingsError(f"{source}={given!r}: not a number") from None
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:
        raise SettingsError(f"{source}={given!r}: expected {kind.__name__}")
    if meta.get("choices") and value not in meta["choices"]:
        raise SettingsError(f"{source}={given!r}: expected one of {', '.join(meta['choices'])}")
    for bound, holds in (("ge", operator.ge), ("le", operator.le), ("gt", operator.gt)):
        limit: float | None = meta.get(bound)
        if limit is not None and not holds(value, limit):
            raise SettingsError(f"{source}={given!r}: must be {bound} {limit}")
    return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def model_list(value: str | None) -> frozenset[str]:
    """Model ids written comma-separated (``CODESHOT_AGENT_LLM_MODELS``)."""
    return frozenset(m.strip() for m in (value or "").split(",") if m.strip())
