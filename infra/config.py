"""Deploy-time choices, read once from CDK context (``cdk.json`` or ``-c key=value``).

Every key is documented in ``cdk.json``; defaults here match it, so the app also
synthesizes when run bare (``python -m infra.app``) from the repository root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from constructs import Node

if TYPE_CHECKING:
    from infra.bundling import Target

REPO_ROOT = Path(__file__).resolve().parent.parent

LLMS = ("bedrock", "fewshot")  # openai needs an endpoint and a key: not a deploy default
CORPUS_SEARCHES = ("lambda", "s3vectors")
# The untuned minilm needs torch: far too big for a Lambda zip (static is MiniLM distilled,
# 4 MB). A tuned one runs in onnxruntime: codeshot:routerModel.
EMBEDDERS = ("bedrock", "static", "hashing")
BUNDLE_TARGETS = ("lambda", "host")


@dataclass(frozen=True)
class InfraConfig:
    stack_name: str = "Codeshot"
    agent_dirs: tuple[str, ...] = ("agent_template",)
    admin_username: str = "admin"
    publish_agents: bool = True
    llm: str = "bedrock"
    llm_model: str = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
    embedder: str = "bedrock"
    embedding_model: str = "amazon.titan-embed-text-v2:0"
    # Ship our own boto3: the embed store's conditional puts (If-None-Match) need a newer
    # botocore than some Lambda runtimes carry. False saves ~25 MB per platform bundle.
    bundle_boto3: bool = True
    # Requests per second and burst on each HTTP API stage (platform and agents).
    api_rate_limit: int = 50
    api_burst_limit: int = 100
    extra_env: dict[str, str] = field(default_factory=dict)
    # Tables and the embeds buckets outlive `cdk destroy` (they hold users' data) unless
    # this is false; everything else (functions, queues, APIs, the signing keys) goes.
    retain_data: bool = True
    # Tables refuse DeleteTable (console, CLI, a stack change that would replace them)
    # until this is turned off and deployed.
    deletion_protection: bool = True
    # Days a session's items are kept after they were last written (DynamoDB TTL; the
    # functions' CODESHOT_SESSION_TTL_DAYS); 0 keeps sessions forever.
    session_ttl_days: int = 90
    # Runner instances SQS may run at once (its event sources' maximum concurrency, which
    # bounds the runner with or without a reservation): size it to the LLM quota (README).
    runner_max_concurrency: int = 10
    # Reservations are off by default: Lambda keeps 100 of an account's concurrency
    # unreserved, and a new account's quota (often 10 to 50) leaves nothing to reserve, so
    # a reservation would fail the first deploy. With a raised quota (README, Deploy):
    # the runner reserves its triggers' maximums (runnerMaxConcurrency + 2), so the API and
    # agents cannot starve it; the API reserves this many (its cap), 0: no reservation.
    reserve_runner_concurrency: bool = False
    api_reserved_concurrency: int = 0
    # Alarms notify an SNS topic; this address is subscribed to it when set.
    alarm_email: str = ""
    # Sign-up codes are sent by Cognito itself, about 50 emails a day for the account;
    # with this address (an SES identity verified in the stack's region) through SES.
    ses_from_email: str = ""
    # Where fixie_query_corpus searches: "lambda" (indexes on S3, loaded by the runner) or
    # "s3vectors" (an S3 Vectors bucket is made; for corpora too large to load).
    corpus_search: str = "lambda"
    # "lambda": arm64 wheels for Lambda's CPython; "host": this machine's (make rehearse).
    bundle_target: str = "lambda"
    # A directory `codeshot router tune` made (relative to the repository root, or
    # absolute): the functions route with it (its tuning in their bundles, its ONNX graph
    # an S3 asset, run by onnxruntime); "": they route with `embedder`, which corpora
    # embed with either way.
    router_model: str = ""

    def __post_init__(self) -> None:
        if self.llm not in LLMS:
            raise ValueError(f"codeshot:llm must be one of {LLMS}, got {self.llm!r}")
        if self.embedder not in EMBEDDERS:
            raise ValueError(f"codeshot:embedder must be one of {EMBEDDERS}, got {self.embedder!r}")
        if self.bundle_target not in BUNDLE_TARGETS:
            raise ValueError(f"codeshot:bundleTarget must be one of {BUNDLE_TARGETS}, "
                             f"got {self.bundle_target!r}")
        if not 2 <= self.runner_max_concurrency <= 1000:  # SQS event sources' range
            raise ValueError("codeshot:runnerMaxConcurrency must be 2..1000, "
                             f"got {self.runner_max_concurrency}")
        if not 0 <= self.session_ttl_days <= 3650:
            raise ValueError("codeshot:sessionTtlDays must be 0..3650, "
                             f"got {self.session_ttl_days}")
        if self.corpus_search not in CORPUS_SEARCHES:
            raise ValueError(f"codeshot:corpusSearch must be one of {CORPUS_SEARCHES}, "
                             f"got {self.corpus_search!r}")
        if self.api_reserved_concurrency < 0:
            raise ValueError("codeshot:apiReservedConcurrency must be 0 or more, "
                             f"got {self.api_reserved_concurrency}")

    @property
    def target(self) -> Target:
        from infra.bundling import LAMBDA_TARGET, host_target

        return host_target() if self.bundle_target == "host" else LAMBDA_TARGET

    def router_model_path(self) -> Path | None:
        return (REPO_ROOT / self.router_model).resolve() if self.router_model else None

    def agent_paths(self) -> list[Path]:
        return [(REPO_ROOT / d).resolve() for d in self.agent_dirs]


def _value(node: Node, key: str, default: Any) -> Any:
    raw = node.try_get_context(key)
    if raw is None:
        return default
    if isinstance(default, bool) and isinstance(raw, str):  # -c key=false arrives as text
        return raw.strip().lower() in ("1", "true", "yes")
    if isinstance(default, (tuple, dict)) and isinstance(raw, str):
        raw = json.loads(raw)  # -c 'codeshot:agentDirs=["a","b"]'
    if isinstance(default, tuple):
        return tuple(raw)
    if isinstance(default, int) and not isinstance(default, bool):
        return int(raw)
    return raw


# Each InfraConfig field's context key (cdk.json, or -c on the command line).
CONTEXT_KEYS = {
    "stack_name": "codeshot:stackName",
    "agent_dirs": "codeshot:agentDirs",
    "admin_username": "codeshot:adminUsername",
    "publish_agents": "codeshot:publishAgents",
    "llm": "codeshot:llm",
    "llm_model": "codeshot:llmModel",
    "embedder": "codeshot:embedder",
    "embedding_model": "codeshot:embeddingModel",
    "bundle_boto3": "codeshot:bundleBoto3",
    "api_rate_limit": "codeshot:apiRateLimit",
    "api_burst_limit": "codeshot:apiBurstLimit",
    "extra_env": "codeshot:extraEnv",
    "retain_data": "codeshot:retainData",
    "bundle_target": "codeshot:bundleTarget",
    "deletion_protection": "codeshot:deletionProtection",
    "session_ttl_days": "codeshot:sessionTtlDays",
    "runner_max_concurrency": "codeshot:runnerMaxConcurrency",
    "reserve_runner_concurrency": "codeshot:reserveRunnerConcurrency",
    "api_reserved_concurrency": "codeshot:apiReservedConcurrency",
    "alarm_email": "codeshot:alarmEmail",
    "ses_from_email": "codeshot:sesFromEmail",
    "corpus_search": "codeshot:corpusSearch",
    "router_model": "codeshot:routerModel",
}


def read_config(node: Node) -> InfraConfig:
    defaults = InfraConfig()
    return InfraConfig(**{f: _value(node, k, getattr(defaults, f))
                          for f, k in CONTEXT_KEYS.items()})
