"""The platform: data, the API and runner Lambdas, the HTTP API, alarms, and the Lambda
that registers deployed agents. Wiring only; the parts live in ``infra/components``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Aws, CfnOutput, CustomResource, Duration, Stack, Token
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as events
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from codeshot.settings import (
    RUNNER_RECORD_MARGIN_SECONDS,
    field_named,
    model_list,
    runner_record_seconds,
)
from codeshot.store import tables
from codeshot.usecases import new_stack
from infra.bundling import (
    API_FUNCTION,
    ERASER_FUNCTION,
    REGISTER_FUNCTION,
    ROUTER_MODEL_DIR,
    RUNNER_FUNCTION,
    PlatformFunction,
    lambda_code,
    platform_bundle,
    router_graph,
)
from infra.components import access
from infra.components.access import (
    BATCH_GET,
    BATCH_WRITE,
    CONDITION_CHECK,
    DELETE,
    GET,
    PUT,
    QUERY,
    SCAN,
    UPDATE,
)
from infra.components.accounts import Accounts
from infra.components.agent_function import REGISTRATION_SERVICE_TIMEOUT
from infra.components.alarms import PlatformAlarms
from infra.components.corpus_vectors import CorpusVectors
from infra.components.data import EmbedsBucket, PlatformTables, SessionQueue
from infra.components.eraser import Eraser
from infra.components.function import PythonFunction
from infra.components.http_api import LambdaHttpApi
from infra.components.signing import OAuthTokenKey, SigningKeys
from infra.config import REPO_ROOT, InfraConfig
from infra.settings_env import configured, extra_env, refuse_stack_settings, settings_env

# API: HTTP APIs cut integrations off at 30 s, so 29 s lets the Lambda answer (or fail)
# first. sendSessionMessage waits for the reply at most REPLY_WAIT, inside that budget,
# leaving REPLY_MARGIN for what the request does around the wait (the quota, the message
# and its enqueue before; reading and answering the reply after).
API_TIMEOUT = Duration.seconds(29)
API_REPLY_WAIT_SECONDS = 24
API_REPLY_MARGIN_SECONDS = 3
# Runner: a planner turn is several LLM calls plus agent calls of up to 30 s each. The
# queue's visibility timeout is 6x this (tables.SESSION_QUEUE), so a message is never
# redelivered while its first attempt still runs.
RUNNER_TIMEOUT = Duration.seconds(tables.RUNNER_TIMEOUT_SECONDS)
# Registration: a handshake (10 s, retried while a new agent's API warms up) + embeddings.
REGISTER_TIMEOUT = Duration.minutes(2)
# Memory buys CPU in Lambda: 1 GB keeps cold imports (FastAPI, Strawberry, pydantic,
# numpy) and the router's matrix maths quick; the registration Lambda is mostly waiting.
API_MEMORY_MB = 1024
RUNNER_MEMORY_MB = 1024
REGISTER_MEMORY_MB = 512
# Functions keep the setting's default name prefix for agents' secrets (IAM is scoped to it).
AGENT_SECRETS_PREFIX = str(field_named("agent_secrets_prefix").default)
# Messages per runner invocation; failures are reported per message, so a bad one does
# not redeliver the rest. FIFO keeps one session's messages in order within a batch.
# Sessions run side by side, each session's records in order, and none starts with less
# than a query's time budget + RUNNER_RECORD_MARGIN_SECONDS left, so a batch finishes or
# reports what it left (codeshot/runner/batch.py); two such records fit in the timeout.
RUNNER_BATCH_SIZE = 10
# Each role's DynamoDB actions, table by table (by its logical name): what its code calls on
# that table, no more (tests/infra/test_function_actions.py reads the calls from the code
# and checks both ways).
API_TABLES: dict[str, tuple[str, ...]] = {
    tables.REGISTRY.logical: (GET, SCAN, PUT, UPDATE, DELETE),
    # CONDITION_CHECK: every write into a session checks its deletion has not begun;
    # DELETE: ending a paused program (a cancel, a decline, an answer that could not be
    # queued) drops its state in the same transaction
    tables.SESSIONS.logical: (GET, QUERY, BATCH_GET, PUT, UPDATE, DELETE, BATCH_WRITE,
                              CONDITION_CHECK),
    tables.USERS.logical: (GET, SCAN, PUT, UPDATE),
    tables.USAGE.logical: (GET, BATCH_GET, PUT, UPDATE),
    tables.USER_STORAGE.logical: (GET, QUERY, PUT, UPDATE, DELETE),  # UPDATE: key counts
    tables.CORPORA.logical: (QUERY, PUT, DELETE),
    tables.OAUTH.logical: (GET, QUERY, PUT, UPDATE, DELETE),
}
RUNNER_TABLES: dict[str, tuple[str, ...]] = {
    tables.SESSIONS.logical: (GET, QUERY, BATCH_GET, PUT, UPDATE, DELETE, BATCH_WRITE,
                              CONDITION_CHECK),
    tables.REGISTRY.logical: (GET, SCAN),  # it cannot write agents; it loads the router's index
    tables.USERS.logical: (GET,),  # a query's user (limits, revocation)
    tables.USAGE.logical: (GET, BATCH_GET, PUT, UPDATE),  # LLM token counters, checked per call
    tables.CORPORA.logical: (QUERY, PUT, DELETE),  # it runs corpus ingestions
}
# Registration reads and writes single items (an agent, its owner): no Scan.
REGISTER_TABLES: dict[str, tuple[str, ...]] = {
    tables.REGISTRY.logical: (GET, PUT, UPDATE, DELETE),
    tables.USERS.logical: (GET, PUT),  # the admin owner, made on first deploy
    tables.CORPORA.logical: (QUERY, PUT, DELETE),  # an agent's corpora, queued for the runner
}
# The prompt queue's trigger: each record is one short HTTP exchange with a task's
# callback; two concurrent batches (SQS's minimum) keep its share of the runner small.
PROMPT_MAX_CONCURRENCY = 2

assert tables.SESSION_QUEUE.visibility_timeout_seconds >= 6 * RUNNER_TIMEOUT.to_seconds()
assert REGISTER_TIMEOUT.to_seconds() < REGISTRATION_SERVICE_TIMEOUT.to_seconds()


class PlatformStack(Stack):
    def __init__(self, scope: Construct, id: str, *, config: InfraConfig, **kwargs: Any) -> None:
        # Termination protection: agent stacks import this one's register function and
        # API URL, so it is deleted last, on purpose (README, Destroy).
        super().__init__(scope, id, description="codeshot platform (API, runner, data)",
                         termination_protection=True, **kwargs)
        self.config = config
        self.tables = PlatformTables(self, "Tables", retain=config.retain_data,
                                     deletion_protection=config.deletion_protection)
        self.embeds = EmbedsBucket(self, "Embeds", retain=config.retain_data)
        self.sessions_queue = SessionQueue(self, "SessionQueue")
        # Agent Protocol callback polls (codeshot.usecases.prompts), read by the runner.
        self.prompt_queue = SessionQueue(self, "PromptQueue", tables.PROMPT_QUEUE)
        self.signing_keys = SigningKeys(self, "SigningKeys")
        self.oauth_key = OAuthTokenKey(self, "OAuthTokenKey")
        self.http = LambdaHttpApi(
            self, "Api", description="codeshot platform API",
            rate_limit=config.api_rate_limit, burst_limit=config.api_burst_limit)
        self.accounts = Accounts(self, "Accounts", api_url=self.http.url,
                                 retain=config.retain_data,
                                 deletion_protection=config.deletion_protection,
                                 ses_from_email=config.ses_from_email)

        table_env = {spec.setting: self.tables.by_spec(spec).table_name for spec in tables.TABLES}
        self.corpus_vectors = None if config.corpus_search != "s3vectors" else CorpusVectors(
            self, "CorpusVectors", bucket_name=f"{config.stack_name.lower()}-corpus-vectors-"
                                               f"{Aws.ACCOUNT_ID}")
        model = config.router_model_path()
        # One copy of the tuned model's graph, which the functions read at their first route.
        self.router_graph = None if model is None else s3_assets.Asset(
            self, "RouterGraph", path=str(router_graph(model)))
        common = settings_env(
            api_url=self.http.url,
            signing_secret_id=self.signing_keys.secret_id,
            oauth_key_secret_id=self.oauth_key.secret_id,
            embedding_model=config.embedding_model,
            **table_env,
        ) | self._router_env()
        corpus_env = {} if self.corpus_vectors is None else settings_env(
            corpus_search="s3vectors", corpus_vector_bucket=self.corpus_vectors.bucket_name)
        data_env = corpus_env | settings_env(
            embeds_bucket=self.embeds.bucket.bucket_name,
            session_ttl_days=config.session_ttl_days,
            llm=config.llm,
            llm_model=config.llm_model,
        )
        extra = extra_env(config.extra_env)
        # The corpus settings are the stack's whichever codeshot:corpusSearch is: the
        # vectors' bucket and its grants come with the context key alone.
        refuse_stack_settings(extra, common | data_env | self.accounts.env() | settings_env(
            queue_url="", queue_name="", prompt_queue_url="", prompt_queue_name="",
            erasure_queue_url="", erasure_queue_name="", deploy_owner="",
            corpus_search="", corpus_vector_bucket=""))
        embedding_models = [config.embedding_model] if config.embedder == "bedrock" else []
        llm_models = [config.llm_model] if config.llm == "bedrock" else []
        # Those agents may choose (extraEnv) are called on the same roles.
        agent_models = sorted(model_list(configured(extra, "agent_llm_models"))) \
            if llm_models else []
        if not Token.is_unresolved(self.region):  # known when deployed with credentials
            for models, setting in (
                    (llm_models, "codeshot:llmModel"),
                    (agent_models, "codeshot:extraEnv CODESHOT_AGENT_LLM_MODELS"),
                    (embedding_models, "codeshot:embeddingModel")):
                for model_id in models:
                    access.check_profile_region(model_id, self.region, setting)
        llm_models += agent_models

        # Deleted users' erasure: its own function, role and queue (the API queues it).
        self.eraser = Eraser(
            self, "Eraser", code=self._code(ERASER_FUNCTION), target=config.target,
            environment=common | corpus_env | settings_env(
                embeds_bucket=self.embeds.bucket.bucket_name,
                session_ttl_days=config.session_ttl_days) | extra,
            data=self.tables, embeds=self.embeds, session_queue=self.sessions_queue.queue,
            corpus_vectors=self.corpus_vectors, agent_secrets_prefix=AGENT_SECRETS_PREFIX)

        self.api = PythonFunction(
            self, "ApiFunction", code=self._code(API_FUNCTION), handler=API_FUNCTION.handler,
            target=config.target,
            description="GraphQL and REST API (Mangum around FastAPI)",
            memory_mb=API_MEMORY_MB, timeout=API_TIMEOUT,
            reserved_concurrency=config.api_reserved_concurrency or None,
            environment=common | data_env | settings_env(
                queue_url=self.sessions_queue.queue.queue_url,
                queue_name=self.sessions_queue.queue.queue_name,
                erasure_queue_url=self.eraser.queue.queue.queue_url,
                erasure_queue_name=self.eraser.queue.queue.queue_name,
                reply_wait_seconds=API_REPLY_WAIT_SECONDS,
                deploy_owner=config.admin_username,
                # A deployed schema is not browsable; codeshot:extraEnv can turn it on.
                graphql_introspection=False) | self.accounts.env() | extra,
        )
        self.http.route_to(self.api.function)
        role = self.api.role
        self._tables(role, API_TABLES)
        access.object_access(role, self.embeds.bucket, self.embeds.prefix, put=True, delete=True)
        # Presigned upload URLs are signed by this role; it reads an upload to bind it.
        access.object_access(role, self.embeds.bucket, self.embeds.uploads_prefix, put=True)
        # A deleted agent's corpus indexes (codeshot/store/corpora.py delete_agent).
        access.object_delete(role, self.embeds.bucket, tables.CORPUS_OBJECTS_PREFIX)
        if self.corpus_vectors is not None:
            self.corpus_vectors.grant_index_deletion(role)
        access.send_messages(role, self.sessions_queue.queue)
        access.send_messages(role, self.eraser.queue.queue)  # a deleted user's erasure
        self.signing_keys.grant_read(role)
        # OAuth for agents (codeshot/usecases/oauth.py): only the API seals and opens tokens.
        self.oauth_key.grant_read(role)
        access.agent_secrets(role, AGENT_SECRETS_PREFIX, manage=True)
        self.accounts.grant_admin(role)
        # The LLM too: agents call it through the OpenAI proxy (/api/openai-proxy/v1).
        access.invoke_models(role, llm_models + embedding_models)
        self._read_router_graph(role)

        self.runner = PythonFunction(
            self, "RunnerFunction", code=self._code(RUNNER_FUNCTION),
            handler=RUNNER_FUNCTION.handler, target=config.target,
            description="Session runner: SQS FIFO batches to answered sessions, and "
                        "Agent Protocol callback polls",
            memory_mb=RUNNER_MEMORY_MB, timeout=RUNNER_TIMEOUT,
            # When reserved, as high as the triggers' maximums together: the API and agents
            # cannot starve it, and SQS never has a batch throttled (a throttle counts as a
            # receive). Unreserved, those maximums still bound it (config.py says why).
            reserved_concurrency=config.runner_max_concurrency + PROMPT_MAX_CONCURRENCY
            if config.reserve_runner_concurrency else None,
            # It queues its own next work: a callback's next poll (up to an hour of them),
            # a sweep's or a session purge's next part. Lambda stops such a chain at its
            # 16th invocation as a loop, dropping the rest to the dead-letter queue. Each
            # chain ends by itself (the prompt's deadline, the last part).
            recursive_loop=lambda_.RecursiveLoop.ALLOW,
            environment=common | data_env | settings_env(
                # A callback's answer is posted to the session queue as the user's message.
                queue_url=self.sessions_queue.queue.queue_url,
                queue_name=self.sessions_queue.queue.queue_name,
                prompt_queue_url=self.prompt_queue.queue.queue_url,
                prompt_queue_name=self.prompt_queue.queue.queue_name) | extra,
        )
        check_time_limits(api_env=self.api.environment, runner_env=self.runner.environment)
        for queue, concurrency in ((self.sessions_queue.queue, config.runner_max_concurrency),
                                   (self.prompt_queue.queue, PROMPT_MAX_CONCURRENCY)):
            self.runner.function.add_event_source(events.SqsEventSource(
                queue, batch_size=RUNNER_BATCH_SIZE, max_concurrency=concurrency,
                report_batch_item_failures=True))
        role = self.runner.role
        access.send_messages(role, self.sessions_queue.queue)
        access.send_messages(role, self.prompt_queue.queue)
        self._tables(role, RUNNER_TABLES)
        # It sweeps a deleted agent registration's user storage (UserStorageStore.
        # sweep_registration): found through the keys-only index, deleted key by key; it
        # can neither read a value nor write an item.
        (by_registration,) = tables.USER_STORAGE.indexes
        access.index_sweep(role, self.tables.by_spec(tables.USER_STORAGE), by_registration.name)
        if self.corpus_vectors is not None:
            self.corpus_vectors.grant_search(role)
        # It reads only embeds its sessions hold, and corpus indexes their versions name:
        # no 404 to tell from a 403.
        access.object_access(role, self.embeds.bucket, self.embeds.prefix, put=True,
                             delete=True, missing_as_404=False)
        # Corpus indexes: it writes them, and deletes those a newer version replaced.
        access.object_access(role, self.embeds.bucket, tables.CORPUS_OBJECTS_PREFIX, put=True,
                             delete=True, missing_as_404=False)
        self.signing_keys.grant_read(role)
        access.agent_secrets(role, AGENT_SECRETS_PREFIX, manage=False)
        access.invoke_models(role, llm_models + embedding_models)
        self._read_router_graph(role)

        self.register_agent = PythonFunction(
            self, "RegisterAgentFunction", code=self._code(REGISTER_FUNCTION),
            handler=REGISTER_FUNCTION.handler, target=config.target,
            description="CloudFormation custom resource: (un)registers deployed agents",
            memory_mb=REGISTER_MEMORY_MB, timeout=REGISTER_TIMEOUT,
            environment=common | corpus_env | settings_env(
                queue_url=self.sessions_queue.queue.queue_url,
                queue_name=self.sessions_queue.queue.queue_name,
                embeds_bucket=self.embeds.bucket.bucket_name) | extra,  # corpus objects
        )
        role = self.register_agent.role
        self._tables(role, REGISTER_TABLES)
        self._hold_new_stack_replies(role)
        access.object_delete(role, self.embeds.bucket, tables.CORPUS_OBJECTS_PREFIX)
        if self.corpus_vectors is not None:
            self.corpus_vectors.grant_index_deletion(role)
        # Users' OAuth tokens for an agent it unregisters (or registers: an earlier agent's)
        # go, found through the table's agent index (codeshot/store/oauth.py forget_agent).
        (by_agent,) = tables.OAUTH.indexes
        access.index_sweep(role, self.tables.by_spec(tables.OAUTH), by_agent.name)
        access.send_messages(role, self.sessions_queue.queue)
        self.signing_keys.grant_read(role)
        access.invoke_models(role, embedding_models)
        self._read_router_graph(role)

        self.alarms = PlatformAlarms(
            self, "Alarms",
            functions={"Api": self.api.function, "Runner": self.runner.function,
                       "RegisterAgent": self.register_agent.function,
                       "Eraser": self.eraser.function.function},
            queue=self.sessions_queue.queue,
            # "" keeps the session queue's alarm id (DeadLetters) as it was deployed.
            dead_letter_queues={"": self.sessions_queue.dlq, "Prompt": self.prompt_queue.dlq,
                                "Erasure": self.eraser.queue.dlq},
            email=config.alarm_email,
        )

        CfnOutput(self, "ApiUrl", value=self.http.url, description="platform API")
        CfnOutput(self, "GraphqlUrl", value=f"{self.http.url}/graphql")
        CfnOutput(self, "JwksUrl", value=f"{self.http.url}/.well-known/jwks.json")
        # What `codeshot users create NAME` needs (with AWS credentials) to add users here.
        CfnOutput(self, "UsersTable", value=self.tables.by_spec(tables.USERS).table_name,
                  description="CODESHOT_USERS_TABLE for the codeshot CLI")
        CfnOutput(self, "SigningSecretId", value=self.signing_keys.secret_id,
                  description="CODESHOT_SIGNING_SECRET_ID for the codeshot CLI")
        CfnOutput(self, "SessionsTable", value=self.tables.by_spec(tables.SESSIONS).table_name,
                  description="CODESHOT_SESSIONS_TABLE for `codeshot users hold-replies`")
        CfnOutput(self, "ErasureQueueUrl", value=self.eraser.queue.queue.queue_url,
                  description="CODESHOT_ERASURE_QUEUE_URL for `codeshot users delete`")
        CfnOutput(self, "UserPoolId", value=self.accounts.pool.user_pool_id,
                  description="CODESHOT_USER_POOL_ID for `codeshot users disable/confirm/"
                              "delete`")

    def _code(self, function: PlatformFunction) -> lambda_.Code:
        spec = platform_bundle(function, target=self.config.target,
                               bundle_boto3=self.config.bundle_boto3,
                               router_model=self.config.router_model_path())
        return lambda_code(spec, REPO_ROOT / "handlers")

    def _router_env(self) -> dict[str, Any]:
        """What every function routes (and embeds agents) with: ``codeshot:embedder``, or
        the tuned model of ``codeshot:routerModel`` (its bundle's tuning, the graph on S3),
        corpora staying on the former (the untuned minilm they would take needs torch)."""
        if self.router_graph is None:
            return settings_env(embedder=self.config.embedder)
        graph = f"s3://{self.router_graph.s3_bucket_name}/{self.router_graph.s3_object_key}"
        return settings_env(embedder="minilm", minilm_model=ROUTER_MODEL_DIR, minilm_graph=graph,
                            corpus_embedder=self.config.embedder)

    def _read_router_graph(self, role: iam.Role) -> None:
        if self.router_graph is not None:  # that one object
            role.add_to_principal_policy(iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[self.router_graph.bucket.arn_for_objects(
                    self.router_graph.s3_object_key)]))

    def _tables(self, role: iam.Role, actions: dict[str, tuple[str, ...]]) -> None:
        self.tables.grant(role, actions)

    def _hold_new_stack_replies(self, role: iam.Role) -> None:
        """The resource that marks a new stack's sessions table as holding every reply's
        embeds (codeshot/usecases/new_stack.py), served by ``role``'s function: it may
        describe this stack alone (is it being created?) and put the mark's item alone. No
        role reads the table's keys to tell whether it is new."""
        table = self.tables.by_spec(tables.SESSIONS)
        access.limited_update(role, table, key=tables.REPLIES_HELD_MARK["session_id"]["S"],
                              action=PUT)
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["cloudformation:DescribeStacks"], resources=[Aws.STACK_ID]))
        CustomResource(self, "RepliesHeld", service_token=self.register_agent.function.function_arn,
                       resource_type=new_stack.RESOURCE_TYPE,
                       service_timeout=REGISTRATION_SERVICE_TIMEOUT)

    @property
    def api_url(self) -> str:
        return self.http.url

    @property
    def register_agent_function(self) -> lambda_.IFunction:
        return self.register_agent.function


def check_time_limits(*, api_env: Mapping[str, Any], runner_env: Mapping[str, Any]) -> None:
    """Settings the functions' timeouts bound (``codeshot:extraEnv`` may change them), checked
    at synth: a deploy with them would time out queries or replies in AWS."""
    budget = float(configured(runner_env, "query_time_budget_seconds"))
    timeout = RUNNER_TIMEOUT.to_seconds()
    if 2 * (runner_record_seconds(budget) + RUNNER_RECORD_MARGIN_SECONDS) >= timeout:
        most = timeout / 2 - RUNNER_RECORD_MARGIN_SECONDS
        raise ValueError(
            f"codeshot:extraEnv: CODESHOT_QUERY_TIME_BUDGET_SECONDS={budget:g} does not fit "
            f"the runner's {timeout:g} s timeout: two queries, each with "
            f"{RUNNER_RECORD_MARGIN_SECONDS} s for its writes, must fit in it (keep the "
            f"budget below {most:g})")
    wait = float(configured(api_env, "reply_wait_seconds"))
    most = API_TIMEOUT.to_seconds() - API_REPLY_MARGIN_SECONDS
    if wait >= most:
        raise ValueError(
            f"codeshot:extraEnv: CODESHOT_REPLY_WAIT_SECONDS={wait:g} does not fit the API's "
            f"{API_TIMEOUT.to_seconds():g} s timeout (HTTP APIs end requests at 30 s) with "
            f"{API_REPLY_MARGIN_SECONDS} s to answer: it must be below {most:g}")
