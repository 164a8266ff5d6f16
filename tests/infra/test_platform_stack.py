"""The platform template: resources as tables.py defines them, and each function's role
holding exactly what that function needs."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from codeshot.settings import FIELDS, RUNNER_RECORD_MARGIN_SECONDS, field_named
from codeshot.store import tables
from codeshot.usecases import new_stack
from infra.bundling import PLATFORM_FUNCTIONS
from infra.platform_stack import API_TABLES, RUNNER_TABLES
from infra.settings_env import env_name
from tests.infra import cfn
from tests.infra.cfn import refs as refs_of

API = "handlers.api.handler"
RUNNER = "handlers.runner.handler"
REGISTER = "handlers.register_agent.handler"
ERASER = "handlers.eraser.handler"
SQS_CONSUME = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"}


def sorted_keys(schema):
    return sorted(schema, key=lambda k: k["KeyType"])


@pytest.mark.parametrize("spec", tables.TABLES, ids=lambda s: s.logical)
def test_each_table_is_generated_from_tables_py(synth, spec):
    props = synth.platform.props(synth.table_id(spec))
    local = spec.create_table_kwargs("unused")  # what the local stack creates
    assert sorted_keys(props["KeySchema"]) == sorted_keys(local["KeySchema"])
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
        local["AttributeDefinitions"], key=lambda a: a["AttributeName"])
    indexes = {i["IndexName"]: (sorted_keys(i["KeySchema"]), i["Projection"])
               for i in props.get("GlobalSecondaryIndexes", [])}
    assert indexes == {i["IndexName"]: (sorted_keys(i["KeySchema"]), i["Projection"])
                       for i in local.get("GlobalSecondaryIndexes", [])}
    if spec.ttl:
        assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl, "Enabled": True}
    else:
        assert "TimeToLiveSpecification" not in props
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"] is True
    assert props["SSESpecification"]["SSEEnabled"] is True
    assert synth.platform.resources[synth.table_id(spec)]["DeletionPolicy"] == "Retain"


def test_no_table_outside_tables_py(synth):
    synth.platform.assertions.resource_count_is("AWS::DynamoDB::Table", len(tables.TABLES))
    synth.agent.assertions.resource_count_is("AWS::DynamoDB::Table", 0)


def embeds_bucket_id(synth) -> str:
    return synth.platform.env(API)[env_name(tables.EMBEDS_BUCKET.setting)]["Ref"]


def test_embeds_bucket_is_private_encrypted_versioned(synth):
    buckets = synth.platform.assertions.find_resources("AWS::S3::Bucket", {"Properties": {
        "PublicAccessBlockConfiguration": {
            "BlockPublicAcls": True, "BlockPublicPolicy": True,
            "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
        "BucketEncryption": {"ServerSideEncryptionConfiguration": [{
            "ServerSideEncryptionByDefault": {"SSEAlgorithm": Match.any_value()}}]},
        "VersioningConfiguration": {"Status": "Enabled"},
        "LoggingConfiguration": Match.any_value(),
    }})
    assert embeds_bucket_id(synth) in buckets
    rule = buckets[embeds_bucket_id(synth)]["Properties"]["BucketEncryption"][
        "ServerSideEncryptionConfiguration"][0]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in ("AES256", "aws:kms")


def test_unbound_uploads_expire_and_only_the_api_may_sign_them(synth):
    synth.platform.assertions.has_resource_properties("AWS::S3::Bucket", {
        "LifecycleConfiguration": {"Rules": Match.array_with([Match.object_like({
            "Prefix": tables.EMBEDS_BUCKET.uploads_prefix, "Status": "Enabled",
            "ExpirationInDays": tables.EMBEDS_BUCKET.uploads_expire_days})])}})
    rules = synth.platform.props(embeds_bucket_id(synth))["LifecycleConfiguration"]["Rules"]
    uploads = [r for r in rules if r.get("Prefix") == tables.EMBEDS_BUCKET.uploads_prefix]
    assert [r["ExpirationInDays"] for r in uploads] == [tables.EMBEDS_BUCKET.uploads_expire_days]
    assert not any("ExpirationInDays" in r for r in rules if r not in uploads)  # embeds stay
    for handler, may in ((API, True), (RUNNER, False), (REGISTER, False)):
        texts = [r for g in synth.platform.grants(handler) if "s3:PutObject" in g.actions
                 for r in g.resource_texts()]
        assert any(tables.EMBEDS_BUCKET.uploads_prefix in r for r in texts) is may, handler


def test_every_bucket_policy_denies_requests_without_tls(synth):
    deny_without_tls = Match.object_like({
        "Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}}})
    policies = synth.platform.assertions.find_resources("AWS::S3::BucketPolicy", {
        "Properties": {"PolicyDocument": {"Statement": Match.array_with([deny_without_tls])}}})
    covered = {p["Properties"]["Bucket"]["Ref"] for p in policies.values()}
    assert embeds_bucket_id(synth) in covered
    assert covered == set(synth.platform.of_type("AWS::S3::Bucket"))  # access logs too


def test_the_embeds_bucket_refuses_overwrites(synth):
    """Any PutObject or CompleteMultipartUpload without If-None-Match is denied, whoever
    sends it; the platform replaces bad bytes by delete + conditional put (embeds.py)."""
    bucket = embeds_bucket_id(synth)
    synth.platform.assertions.has_resource_properties("AWS::S3::BucketPolicy", {
        "Bucket": {"Ref": bucket},
        "PolicyDocument": {"Statement": Match.array_with([{
            "Sid": "DenyOverwrites", "Effect": "Deny", "Principal": {"AWS": "*"},
            "Action": "s3:PutObject",
            "Resource": {"Fn::Join": ["", [{"Fn::GetAtt": [bucket, "Arn"]}, "/*"]]},
            "Condition": {"Null": {"s3:if-none-match": "true"},
                          "Bool": {"s3:ObjectCreationOperation": "true"}}}])}})
    # Deleting (to replace) is granted to the two writers of embeds/, and only there; and
    # under corpora/ to those that delete an agent's corpus (or a version's, the runner).
    embeds, corpora = f"<{bucket}.Arn>/{tables.EMBEDS_BUCKET.prefix}*", f"<{bucket}.Arn>/corpora/*"
    for handler, may in ((API, [corpora, embeds]), (RUNNER, [corpora, embeds]),
                         (REGISTER, [corpora])):
        texts = [r for g in synth.platform.grants(handler) if "s3:DeleteObject" in g.actions
                 for r in g.resource_texts()]
        assert sorted(texts) == may, handler
    # A delete marker's removal (an embed's delete undone) is the eraser's, under embeds/.
    texts = [(handler, r) for handler in (API, RUNNER, REGISTER, ERASER)
             for g in synth.platform.grants(handler) if "s3:DeleteObjectVersion" in g.actions
             for r in g.resource_texts()]
    assert texts == [(ERASER, embeds)]
    # Found by listing the embed's versions: that listing too, of embeds/ alone.
    listings = [(handler, g.resource_texts(), g.condition)
                for handler in (API, RUNNER, REGISTER, ERASER)
                for g in synth.platform.grants(handler) if "s3:ListBucketVersions" in g.actions]
    assert listings == [(ERASER, [f"<{bucket}.Arn>"],
                         {"StringLike": {"s3:prefix": [tables.EMBEDS_BUCKET.prefix + "*"]}})]


def test_sessions_expire_after_the_ttl_setting(synth, tmp_path):
    synth.platform.assertions.has_resource_properties("AWS::DynamoDB::Table", {
        "KeySchema": Match.array_with([{"AttributeName": "session_id", "KeyType": "HASH"}]),
        "TimeToLiveSpecification": {"AttributeName": "expires_at", "Enabled": True}})
    for handler in (API, RUNNER):  # the two that write sessions
        synth.platform.assertions.has_resource_properties("AWS::Lambda::Function", {
            "Handler": handler, "Environment": {"Variables": Match.object_like(
                {"CODESHOT_SESSION_TTL_DAYS": "90"})}})
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path / "week", **{"codeshot:sessionTtlDays": 7}).platform
    assert {platform.env(h)["CODESHOT_SESSION_TTL_DAYS"] for h in (API, RUNNER)} == {"7"}
    with pytest.raises(ValueError, match=r"sessionTtlDays must be 0\.\.3650"):
        synthesize(tmp_path / "bad", **{"codeshot:sessionTtlDays": -1})


def test_queue_is_fifo_with_a_fifo_dead_letter_queue(synth):
    queue_url = synth.platform.env(API)[env_name("queue_url")]
    queue_id = queue_url["Ref"]
    spec = tables.SESSION_QUEUE
    template = synth.platform.assertions
    queues = template.find_resources("AWS::SQS::Queue", {"Properties": {
        "FifoQueue": True, "SqsManagedSseEnabled": True,
        "VisibilityTimeout": spec.visibility_timeout_seconds,
        "MessageRetentionPeriod": spec.retention_seconds,
        "RedrivePolicy": {"maxReceiveCount": spec.max_receive_count,
                          "deadLetterTargetArn": Match.any_value()}}})
    assert list(queues) == [queue_id]
    dlq_id = queues[queue_id]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"][
        "Fn::GetAtt"][0]
    assert dlq_id in template.find_resources("AWS::SQS::Queue", {"Properties": {
        "FifoQueue": True, "SqsManagedSseEnabled": True}})
    # The runner consumes it in batches and reports failures per message.
    # (the prompt queue's too, and the eraser's its own queue)
    template.resource_count_is("AWS::Lambda::EventSourceMapping", 3)
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [queue_id, "Arn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "BatchSize": 10,
        "ScalingConfig": {"MaximumConcurrency": 10},
        "FunctionName": {"Ref": synth.platform.function(RUNNER)[0]},
    })
    # TLS only for the queues too.
    denies = [st for p in synth.platform.of_type("AWS::SQS::QueuePolicy").values()
              for st in p["Properties"]["PolicyDocument"]["Statement"] if st["Effect"] == "Deny"]
    assert len(denies) == 6 and all(  # the session, prompt, erasure queues and their DLQs
        d["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for d in denies)


def test_the_prompt_queue_is_standard_for_its_delays_and_read_by_the_runner(synth):
    """Agent Protocol callback polls wait out their backoff as SQS delays, which only a
    standard queue has per message."""
    queue_id = synth.platform.env(RUNNER)[env_name("prompt_queue_url")]["Ref"]
    spec = tables.PROMPT_QUEUE
    template = synth.platform.assertions
    [queue] = [q for q_id, q in synth.platform.of_type("AWS::SQS::Queue").items()
               if q_id == queue_id]
    props = queue["Properties"]
    assert "FifoQueue" not in props and props["SqsManagedSseEnabled"]
    assert props["RedrivePolicy"]["maxReceiveCount"] == spec.max_receive_count
    dlq_id = props["RedrivePolicy"]["deadLetterTargetArn"]["Fn::GetAtt"][0]
    assert "FifoQueue" not in synth.platform.of_type("AWS::SQS::Queue")[dlq_id]["Properties"]
    template.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [queue_id, "Arn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "ScalingConfig": {"MaximumConcurrency": 2},
        "FunctionName": {"Ref": synth.platform.function(RUNNER)[0]},
    })
    assert env_name("prompt_queue_url") not in synth.platform.env(API)


def test_the_eraser_has_its_own_queue_and_the_runner_no_destructive_grant(synth):
    """A deleted user's data is erased by a function of its own, fed by an encrypted
    standard queue (per-message delays) with a dead-letter queue; the runner, which
    handles agents' and LLMs' traffic, may delete no agent, secret, user, OAuth token or
    usage counter, nor send to that queue."""
    platform = synth.platform
    queue_id = platform.env(ERASER)[env_name("erasure_queue_url")]["Ref"]
    assert platform.env(API)[env_name("erasure_queue_url")] == {"Ref": queue_id}
    assert env_name("erasure_queue_url") not in platform.env(RUNNER)
    spec = tables.ERASURE_QUEUE
    props = platform.of_type("AWS::SQS::Queue")[queue_id]["Properties"]
    assert "FifoQueue" not in props and props["SqsManagedSseEnabled"]
    assert props["RedrivePolicy"]["maxReceiveCount"] == spec.max_receive_count
    assert props["VisibilityTimeout"] == spec.visibility_timeout_seconds
    platform.assertions.has_resource_properties("AWS::Lambda::EventSourceMapping", {
        "EventSourceArn": {"Fn::GetAtt": [queue_id, "Arn"]},
        "FunctionResponseTypes": ["ReportBatchItemFailures"],
        "FunctionName": {"Ref": platform.function(ERASER)[0]},
    })
    assert "secretsmanager:DeleteSecret" not in platform.all_actions(RUNNER)
    assert "secretsmanager:DeleteSecret" in platform.all_actions(ERASER)
    for table in (tables.REGISTRY, tables.USERS, tables.USAGE, tables.OAUTH):
        assert not platform.actions_on(RUNNER, synth.table_id(table)) & {
            "dynamodb:DeleteItem", "dynamodb:BatchWriteItem", "dynamodb:UpdateItem"} - (
            {"dynamodb:UpdateItem"} if table is tables.USAGE else set()), table.logical
    assert not platform.grants_on(RUNNER, queue_id)
    # The eraser puts no session item but a DELETED marker: its PutItem names no other
    # attribute than the marker's, and it has no BatchWriteItem (which puts any item).
    assert "dynamodb:BatchWriteItem" not in platform.all_actions(ERASER)
    sessions = synth.table_id(tables.SESSIONS)
    [put] = [g for g in platform.grants(ERASER) if "dynamodb:PutItem" in g.actions
             and sessions in g.targets()]
    assert put.condition == {"ForAllValues:StringEquals": {"dynamodb:Attributes": [
        "session_id", "item", "deleted_owner", "deleted_created", "expires_at"]}}


@pytest.mark.parametrize("handler", [API, RUNNER, REGISTER, ERASER])
def test_functions_runtime_and_observability(synth, handler):
    _, props = synth.platform.function(handler)
    version = tuple(int(p) for p in props["Runtime"].removeprefix("python").split("."))
    assert props["Runtime"].startswith("python") and version >= (3, 12)
    assert props["Architectures"] == ["arm64"]
    assert props["TracingConfig"] == {"Mode": "Active"}
    log_group = synth.platform.props(props["LoggingConfig"]["LogGroup"]["Ref"])
    assert log_group["RetentionInDays"] == 30
    for name in props["Environment"]["Variables"]:  # every variable is a real setting
        assert name.startswith("CODESHOT_")
        assert name.removeprefix("CODESHOT_").lower() in {f.name for f in FIELDS}, name


def test_only_the_runner_may_queue_its_own_work_past_lambdas_loop_detection(synth):
    """The runner queues a callback's next poll (about 65 in an hour), a sweep's and a
    purge's next part: Lambda's default stops such a chain at 16 invocations, leaving a
    question waiting for ever and a deleted agent's storage half swept."""
    assert synth.platform.function(RUNNER)[1]["RecursiveLoop"] == "Allow"
    for handler in (API, REGISTER):
        assert synth.platform.function(handler)[1].get("RecursiveLoop", "Terminate") == \
            "Terminate"


def test_timeouts_fit_api_gateway_and_the_queue(synth):
    assert synth.platform.function(API)[1]["Timeout"] <= 29
    # AWS's advice for SQS triggers: visibility >= 6x the function timeout, 5+ receives.
    runner_timeout = synth.platform.function(RUNNER)[1]["Timeout"]
    assert tables.SESSION_QUEUE.visibility_timeout_seconds >= 6 * runner_timeout
    assert tables.SESSION_QUEUE.max_receive_count >= 5
    # A batch of slow queries cannot outlive the invocation: each starts with its budget
    # and margin left, so at least two fit, and the rest are reported back
    # (codeshot/runner/batch.py).
    budget = field_named("query_time_budget_seconds").default
    assert "CODESHOT_QUERY_TIME_BUDGET_SECONDS" not in synth.platform.env(RUNNER)
    assert 2 * (budget + RUNNER_RECORD_MARGIN_SECONDS) < runner_timeout
    reply_wait = int(synth.platform.env(API)["CODESHOT_REPLY_WAIT_SECONDS"])
    assert reply_wait < synth.platform.function(API)[1]["Timeout"] - 3


@pytest.mark.parametrize(("name", "value", "error"), [
    # two records of 140 + 10 s would end with the runner's 300 s
    ("CODESHOT_QUERY_TIME_BUDGET_SECONDS", "140", "below 140"),
    # the API must still answer within its 29 s (HTTP APIs end requests at 30 s)
    ("CODESHOT_REPLY_WAIT_SECONDS", "26", "below 26"),
])
def test_extra_env_cannot_outlast_the_functions_timeouts(tmp_path, name, value, error):
    from tests.infra.conftest import synthesize

    with pytest.raises(ValueError, match=rf"codeshot:extraEnv: {name}={value} .*{error}"):
        synthesize(tmp_path, **{"codeshot:extraEnv": {name: value}})


def test_an_inference_profile_of_another_geography_is_refused_once_the_region_is_known(
        tmp_path, monkeypatch):
    """`cdk deploy` with credentials knows the region (CDK_DEFAULT_REGION): the default
    US profile from eu-west-1 would have every Bedrock call refused."""
    from tests.infra.conftest import synthesize

    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", "123456789012")
    monkeypatch.setenv("CDK_DEFAULT_REGION", "eu-west-1")
    with pytest.raises(ValueError, match=r"codeshot:llmModel us\.anthropic\.claude-haiku-4-5"):
        synthesize(tmp_path / "us")
    with pytest.raises(ValueError, match=r"codeshot:extraEnv CODESHOT_AGENT_LLM_MODELS us\."):
        synthesize(tmp_path / "agents", **{
            "codeshot:llmModel": "eu.anthropic.claude-haiku-4-5-20251001-v1:0",
            "codeshot:extraEnv": {"CODESHOT_AGENT_LLM_MODELS":
                                  "us.anthropic.claude-3-5-haiku-20241022-v1:0"}})
    eu = synthesize(tmp_path / "eu", **{
        "codeshot:llmModel": "eu.anthropic.claude-haiku-4-5-20251001-v1:0"})
    assert ("inference-profile/eu.anthropic.claude-haiku-4-5-20251001-v1:0"
            in invoked_models(eu.platform, RUNNER))


def test_extra_env_up_to_the_bounds_is_deployed(tmp_path):
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path, **{"codeshot:extraEnv": {
        "CODESHOT_QUERY_TIME_BUDGET_SECONDS": "139", "CODESHOT_REPLY_WAIT_SECONDS": "25.5"}}
                          ).platform
    assert platform.env(RUNNER)["CODESHOT_QUERY_TIME_BUDGET_SECONDS"] == "139"
    assert platform.env(API)["CODESHOT_REPLY_WAIT_SECONDS"] == "25.5"


def test_extra_env_reaches_every_function_and_their_roles(tmp_path):
    """The runner's own settings were applied after extraEnv's, so a setting every
    function reads (here the LLM's timeout) differed between them; and no role could
    call the models `CODESHOT_AGENT_LLM_MODELS` lets agents choose."""
    from tests.infra.conftest import synthesize

    chosen = "anthropic.claude-3-5-haiku-20241022-v1:0"
    platform = synthesize(tmp_path, **{"codeshot:extraEnv": {
        "CODESHOT_LLM_TIMEOUT_SECONDS": "45", "CODESHOT_AGENT_LLM_MODELS": chosen}}).platform
    for handler in (API, RUNNER, REGISTER):
        assert platform.env(handler)["CODESHOT_LLM_TIMEOUT_SECONDS"] == "45", handler
    for handler in (API, RUNNER):  # the proxy's calls, and the runner's
        assert f"foundation-model/{chosen}" in invoked_models(platform, handler), handler


@pytest.mark.parametrize(("name", "value", "error"), [
    ("CODESHOT_LLM", "openai", "set codeshot:llm instead"),
    ("CODESHOT_SESSION_TTL_DAYS", "7", "set codeshot:sessionTtlDays instead"),
    ("CODESHOT_EMBEDS_BUCKET", "mine", "it names one of the stack's own resources"),
    ("CODESHOT_PROMPT_QUEUE_URL", "https://x", "it names one of the stack's own resources"),
    # lambda (cdk.json) here: s3vectors would search a bucket the stack does not make
    ("CODESHOT_CORPUS_SEARCH", "s3vectors", "set codeshot:corpusSearch instead"),
])
def test_extra_env_cannot_set_what_the_stack_sets(tmp_path, name, value, error):
    """The runner went on reading the stack's value, and roles were granted for it: a
    `CODESHOT_LLM` of openai left the runner, which answers every query, on Bedrock."""
    from tests.infra.conftest import synthesize

    with pytest.raises(ValueError, match=f"codeshot:extraEnv: {name} is set by the stack: "
                                         f"{error}"):
        synthesize(tmp_path, **{"codeshot:extraEnv": {name: value}})


def test_environment_points_functions_at_the_resources(synth):
    env = synth.platform.env(API)
    (api_id,) = synth.platform.of_type("AWS::ApiGatewayV2::Api")
    assert env["CODESHOT_API_URL"] == {"Fn::GetAtt": [api_id, "ApiEndpoint"]}
    assert env["CODESHOT_LLM"] == "bedrock"
    assert env["CODESHOT_EMBEDDER"] in ("bedrock", "hashing")
    assert env["CODESHOT_SIGNING_SECRET_ID"] == {
        "Ref": seed_secret_id(synth, tables.SIGNING_SECRET)}
    assert env["CODESHOT_OAUTH_KEY_SECRET_ID"] == {
        "Ref": seed_secret_id(synth, tables.OAUTH_KEY_SECRET)}
    assert "CODESHOT_QUEUE_URL" in env
    # It enqueues only a callback's answer (Agent Protocol prompts) and the next poll.
    runner = synth.platform.env(RUNNER)
    assert runner["CODESHOT_QUEUE_URL"] == env["CODESHOT_QUEUE_URL"]
    assert "CODESHOT_PROMPT_QUEUE_URL" in runner
    assert env["CODESHOT_API_URL"] == synth.platform.env(RUNNER)["CODESHOT_API_URL"]
    assert env["CODESHOT_GRAPHQL_INTROSPECTION"] == "false"  # a deployed schema is not browsable
    # its deleteAccount refused (codeshot:adminUsername)
    assert env["CODESHOT_DEPLOY_OWNER"] == "admin"


def test_http_api_default_route_goes_to_the_api_function_with_throttling(synth):
    t = synth.platform
    (route,) = t.of_type("AWS::ApiGatewayV2::Route").values()
    assert route["Properties"]["RouteKey"] == "$default"
    integration = t.props(route["Properties"]["Target"]["Fn::Join"][1][1]["Ref"])
    assert integration["IntegrationType"] == "AWS_PROXY"
    assert integration["PayloadFormatVersion"] == "2.0"
    assert refs_of(integration["IntegrationUri"]) == {t.function(API)[0]}
    (stage,) = t.of_type("AWS::ApiGatewayV2::Stage").values()
    assert stage["Properties"]["StageName"] == "$default"
    throttle = stage["Properties"]["DefaultRouteSettings"]
    assert throttle["ThrottlingRateLimit"] > 0 and throttle["ThrottlingBurstLimit"] > 0
    assert "AccessLogSettings" in stage["Properties"]


def test_outputs(synth):
    outputs = synth.platform.data["Outputs"]
    (api_id,) = synth.platform.of_type("AWS::ApiGatewayV2::Api")
    endpoint = {"Fn::GetAtt": [api_id, "ApiEndpoint"]}
    assert outputs["ApiUrl"]["Value"] == endpoint
    assert outputs["GraphqlUrl"]["Value"] == {"Fn::Join": ["", [endpoint, "/graphql"]]}
    assert outputs["JwksUrl"]["Value"] == {"Fn::Join": ["", [endpoint, "/.well-known/jwks.json"]]}
    assert outputs["UsersTable"]["Value"] == {"Ref": synth.table_id(tables.USERS)}
    # what `codeshot users hold-replies` needs besides
    assert outputs["SessionsTable"]["Value"] == {"Ref": synth.table_id(tables.SESSIONS)}
    assert outputs["SigningSecretId"]["Value"] == synth.platform.env(API)[
        "CODESHOT_SIGNING_SECRET_ID"]


def test_alarms_notify_a_topic_on_errors_throttles_backlog_and_given_up_work(synth):
    alarms = [a["Properties"] for a in synth.platform.of_type("AWS::CloudWatch::Alarm").values()]
    errors = {refs_of(a["Dimensions"]).pop() for a in alarms if a["MetricName"] == "Errors"}
    assert errors == {synth.platform.function(h)[0] for h in (API, RUNNER, REGISTER, ERASER)}
    dlqs = [a for a in alarms if a["MetricName"] == "ApproximateNumberOfMessagesVisible"]
    assert len(dlqs) == 3 and all(a["Threshold"] == 1 for a in dlqs)
    queue_id = synth.platform.env(API)["CODESHOT_QUEUE_URL"]["Ref"]
    dlq_ids = set()
    for queue in (queue_id,
                  synth.platform.env(RUNNER)["CODESHOT_PROMPT_QUEUE_URL"]["Ref"],
                  synth.platform.env(ERASER)[env_name("erasure_queue_url")]["Ref"]):
        dlq_ids.add(synth.platform.props(queue)["RedrivePolicy"]["deadLetterTargetArn"][
            "Fn::GetAtt"][0])
    assert {refs_of(a["Dimensions"]).pop() for a in dlqs} == dlq_ids
    throttles = {refs_of(a["Dimensions"]).pop() for a in alarms if a["MetricName"] == "Throttles"}
    assert throttles == errors
    [backlog] = [a for a in alarms if a["MetricName"] == "ApproximateAgeOfOldestMessage"]
    assert refs_of(backlog["Dimensions"]) == {queue_id} and backlog["Threshold"] == 300
    [given_up] = [a for a in alarms if a["MetricName"] == "QueriesGivenUp"]
    assert given_up["Namespace"] == "codeshot"
    # Every alarm notifies the one topic: encrypted, TLS only, no subscriber by default.
    (topic_id,) = synth.platform.of_type("AWS::SNS::Topic")
    assert all(a["AlarmActions"] == [{"Ref": topic_id}] for a in alarms)
    assert synth.platform.props(topic_id)["KmsMasterKeyId"]
    assert not synth.platform.of_type("AWS::SNS::Subscription")
    # One dashboard: every alarm's metric and threshold, and each function's invocations
    # and p99 duration.
    [dashboard] = synth.platform.of_type("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    assert body.count('\\"label\\":\\"alarm\\"') == len(alarms) and "p99" in body, body[:300]


FROM_OUR_ALARMS = {
    "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
    "ArnLike": {"aws:SourceArn": {"Fn::Join": ["", [
        "arn:", {"Ref": "AWS::Partition"}, ":cloudwatch:", {"Ref": "AWS::Region"}, ":",
        {"Ref": "AWS::AccountId"}, ":alarm:*"]]}}}


def test_cloudwatch_may_publish_to_the_alarm_topic_and_use_its_key(synth):
    """An alarm reaches its subscribers only if CloudWatch may use the topic's key: the
    AWS-managed alias/aws/sns cannot let it (its policy is AWS's), so the topic has a
    customer-managed key, rotated, whose policy lets CloudWatch in for this account's
    alarms only (and the topic's policy lets it publish, on the same conditions)."""
    t = synth.platform
    (topic_id,) = t.of_type("AWS::SNS::Topic")
    (key_id,) = refs_of(t.props(topic_id)["KmsMasterKeyId"])
    assert t.resources[key_id]["Type"] == "AWS::KMS::Key"
    assert t.resources[key_id]["DeletionPolicy"] == "Delete"  # it keeps no data
    t.assertions.has_resource_properties("AWS::KMS::Key", {
        "EnableKeyRotation": True,
        "KeyPolicy": {"Statement": Match.array_with([{
            "Effect": "Allow", "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey*"], "Resource": "*",
            "Condition": FROM_OUR_ALARMS}])}})
    t.assertions.has_resource_properties("AWS::SNS::TopicPolicy", {
        "Topics": [{"Ref": topic_id}],
        "PolicyDocument": {"Statement": Match.array_with([Match.object_like({
            "Effect": "Allow", "Principal": {"Service": "cloudwatch.amazonaws.com"},
            "Action": "sns:Publish", "Resource": {"Ref": topic_id},
            "Condition": FROM_OUR_ALARMS})])}})


def test_an_alarm_email_is_subscribed_when_set(tmp_path):
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path, **{"codeshot:alarmEmail": "ops@example.com"}).platform
    [subscription] = platform.of_type("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == "ops@example.com"


def seed_secret_id(synth, spec: tables.SeedSecret) -> str:
    (secret_id,) = [k for k, v in synth.platform.of_type("AWS::SecretsManager::Secret").items()
                    if v["Properties"]["Description"].startswith(spec.description)]
    return secret_id


@pytest.mark.parametrize(("spec", "readers"), [
    (tables.SIGNING_SECRET, (API, RUNNER, REGISTER)),  # every function checks or mints JWTs
    (tables.OAUTH_KEY_SECRET, (API,)),  # only the API seals and opens users' OAuth tokens
])
def test_seed_secrets_are_generated_at_deploy_and_go_with_the_stack(synth, spec, readers):
    secret_id = seed_secret_id(synth, spec)
    secret = synth.platform.resources[secret_id]
    generate = secret["Properties"]["GenerateSecretString"]
    assert generate["GenerateStringKey"] == spec.seed_key
    assert generate["PasswordLength"] == spec.seed_length >= 64
    assert generate["ExcludePunctuation"] is True
    assert "SecretString" not in secret["Properties"]
    assert secret["DeletionPolicy"] == "Delete"
    for handler in (API, RUNNER, REGISTER):  # the platform only reads it
        expected = {"secretsmanager:GetSecretValue"} if handler in readers else set()
        assert synth.platform.actions_on(handler, secret_id) == expected, handler


def test_destroy_keeps_the_tables_and_buckets_and_nothing_else(synth):
    kept = {k for k, v in synth.platform.resources.items() if v.get("DeletionPolicy") == "Retain"}
    data = set(synth.platform.of_type("AWS::DynamoDB::Table")) | set(
        synth.platform.of_type("AWS::S3::Bucket")) | set(
        synth.platform.of_type("AWS::Cognito::UserPool"))  # accounts
    assert kept == data
    assert not [k for k, v in synth.agent.resources.items() if v.get("DeletionPolicy") == "Retain"]


# Lambda keeps this much of an account's concurrency unreserved: a deploy whose
# reservations leave less fails ("...decreases account's UnreservedConcurrentExecution
# below its minimum value").
UNRESERVED_MINIMUM = 100


def reserved(platform) -> int:
    return sum(f["Properties"].get("ReservedConcurrentExecutions", 0)
               for f in platform.of_type("AWS::Lambda::Function").values())


def test_the_default_deploy_fits_a_new_accounts_concurrency_quota(synth):
    """A new account's Lambda quota is often 10: the default reserves nothing, so the first
    deploy succeeds; the SQS triggers' maximum concurrency still bounds the runner."""
    for template in (synth.platform, synth.agent):
        assert reserved(template) == 0, "any reservation needs a quota of 100 more"
    maximums = sorted(m["Properties"]["ScalingConfig"]["MaximumConcurrency"]
                      for m in synth.platform.of_type("AWS::Lambda::EventSourceMapping").values())
    assert maximums == [2, 2, 10]  # the prompt queue's, the erasure queue's, the runner's


def test_reservations_come_from_context_and_cover_the_runners_triggers(tmp_path):
    """With a raised quota: the runner's reservation is at least its triggers' maximums
    together (so batches are never throttled back to the queues), and the API's caps it."""
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path, **{"codeshot:runnerMaxConcurrency": 40,
                                       "codeshot:reserveRunnerConcurrency": "true",
                                       "codeshot:apiReservedConcurrency": 200}).platform
    runner = {"Ref": platform.function(RUNNER)[0]}
    maximums = sorted(m["Properties"]["ScalingConfig"]["MaximumConcurrency"]
                      for m in platform.of_type("AWS::Lambda::EventSourceMapping").values()
                      if m["Properties"]["FunctionName"] == runner)
    assert maximums == [2, 40]  # the prompt queue's is fixed
    assert platform.function(RUNNER)[1]["ReservedConcurrentExecutions"] == 42 == sum(maximums)
    assert platform.function(API)[1]["ReservedConcurrentExecutions"] == 200
    assert "ReservedConcurrentExecutions" not in platform.function(REGISTER)[1]
    # The account quota this needs, as the README's Deploy section states it.
    assert reserved(platform) + UNRESERVED_MINIMUM == 342


@pytest.mark.parametrize(("key", "value"), [("codeshot:runnerMaxConcurrency", 1),
                                       ("codeshot:apiReservedConcurrency", -1)])
def test_bad_concurrency_settings_are_refused(tmp_path, key, value):
    from tests.infra.conftest import synthesize

    with pytest.raises(ValueError, match=key):
        synthesize(tmp_path, **{key: value})


def test_tables_and_the_platform_stack_are_protected_from_deletion(synth, tmp_path):
    tables_ = synth.platform.of_type("AWS::DynamoDB::Table").values()
    assert all(t["Properties"]["DeletionProtectionEnabled"] is True for t in tables_)
    manifest = json.loads((synth.outdir / "manifest.json").read_text())
    assert manifest["artifacts"]["Codeshot"]["properties"]["terminationProtection"] is True
    assert not manifest["artifacts"]["CodeshotAgent-notes"]["properties"].get(
        "terminationProtection")
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path, **{"codeshot:deletionProtection": False}).platform
    assert not any(t["Properties"].get("DeletionProtectionEnabled")
                   for t in platform.of_type("AWS::DynamoDB::Table").values())


def test_retain_data_false_lets_destroy_remove_everything(tmp_path):
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path, **{"codeshot:retainData": False}).platform
    assert not [k for k, v in platform.resources.items()
                if v.get("DeletionPolicy") in ("Retain", "Snapshot")]
    # Buckets are emptied first by CDK's auto-delete custom resource, or deleting fails.
    assert len(platform.of_type("Custom::S3AutoDeleteObjects")) == 2


def assert_reads_only_the_signing_secret(synth, handler: str,
                                         agent_secrets: set[str] | None = None,
                                         oauth_key: bool = False) -> None:
    """The signing keys it reads (and the OAuth token key, ``oauth_key``); under agents'
    secrets' prefix only ``agent_secrets`` (what the MCP agents' Authorization headers
    need), or nothing."""
    seeds = [tables.SIGNING_SECRET, *([tables.OAUTH_KEY_SECRET] if oauth_key else [])]
    readable, prefix = [{"Ref": seed_secret_id(synth, spec)} for spec in seeds], set()
    for grant in synth.platform.grants(handler):
        if not any(a.startswith("secretsmanager:") for a in grant.actions):
            continue
        for resource in grant.resources:
            if resource in readable:
                assert grant.actions == {"secretsmanager:GetSecretValue"}
            else:
                assert cfn.text(resource).endswith(":secret:codeshot/agent-auth/*"), resource
                prefix |= grant.actions
    assert prefix == (agent_secrets or set())


# --- least privilege, function by function -------------------------------------------------

def sessions_scans(t, table: str) -> list[str]:
    """The logical ids of the roles granted a Scan of the sessions table."""
    return sorted(p for p, props in t.of_type("AWS::IAM::Policy").items()
                  for st in props["Properties"]["PolicyDocument"]["Statement"]
                  if table in refs_of(st["Resource"]) and "dynamodb:Scan" in (
                      st["Action"] if isinstance(st["Action"], list) else [st["Action"]]))


def test_no_role_may_page_through_the_sessions_tables_keys(synth):
    """A Scan, even of keys alone, pages through every session id and content hash: the
    API and registration roles once had one to tell a new stack's empty table (a user
    made marked it). The mark is now made while CloudFormation creates the stack
    (test_a_new_stacks_sessions_table_is_marked_by_a_resource_of_its_creation)."""
    t = synth.platform
    sessions = synth.table_id(tables.SESSIONS)
    for handler in (API, RUNNER, REGISTER, ERASER):
        assert "dynamodb:Scan" not in t.actions_on(handler, sessions), handler
    assert sessions_scans(t, sessions) == []


def test_a_new_stacks_sessions_table_is_marked_by_a_resource_of_its_creation(synth):
    """The registration function serves it: it may describe this stack alone (is it
    being created?) and put the mark's item alone."""
    t = synth.platform
    (resource,) = t.of_type(new_stack.RESOURCE_TYPE).values()
    register_id, _ = t.function(REGISTER)
    assert refs_of(resource["Properties"]["ServiceToken"]) == {register_id}
    describe = [g for g in t.grants(REGISTER) if any(a.startswith("cloudformation:")
                                                     for a in g.actions)]
    assert [(set(g.actions), g.resources, g.condition) for g in describe] == [
        ({"cloudformation:DescribeStacks"}, ({"Ref": "AWS::StackId"},), None)]
    for handler in (API, RUNNER, ERASER):
        assert not {a for a in t.all_actions(handler) if a.startswith("cloudformation:")}


def test_api_role(synth):
    t = synth.platform
    for spec in tables.TABLES:  # it reads and writes every table
        assert t.actions_on(API, synth.table_id(spec)) == set(API_TABLES[spec.logical])
    bucket = embeds_bucket_id(synth)
    assert t.actions_on(API, bucket) == {"s3:GetObject", "s3:PutObject", "s3:DeleteObject",
                                         "s3:ListBucket"}
    assert corpus_grants(t, API) == [{"s3:DeleteObject"}]  # a deleted agent's indexes
    queue = t.env(API)["CODESHOT_QUEUE_URL"]["Ref"]
    assert t.actions_on(API, queue) == {"sqs:SendMessage"}  # it cannot consume
    assert not SQS_CONSUME & t.all_actions(API)
    assert_reads_only_the_signing_secret(synth, API, {
        "secretsmanager:GetSecretValue", "secretsmanager:CreateSecret",
        "secretsmanager:DeleteSecret"}, oauth_key=True)
    # Agents reach the platform's LLM through the API's OpenAI proxy.
    assert "foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0" in invoked_models(t, API)
    assert "inference-profile/us.anthropic.claude-haiku-4-5-20251001-v1:0" in invoked_models(
        t, API)


def invoked_models(t, handler) -> str:
    grants = [g for g in t.grants(handler) if "bedrock:InvokeModel" in g.actions]
    return " ".join(r for g in grants for r in g.resource_texts())


def test_runner_role(synth):
    t = synth.platform
    assert t.actions_on(RUNNER, synth.table_id(tables.SESSIONS)) == set(
        RUNNER_TABLES[tables.SESSIONS.logical])
    # It reads agents (and scans them for the router's index), and cannot write them.
    assert t.actions_on(RUNNER, synth.table_id(tables.REGISTRY)) == {
        "dynamodb:GetItem", "dynamodb:Scan"}
    # A query's user, by key: it cannot list the users (Scan) or look one up by name.
    assert t.actions_on(RUNNER, synth.table_id(tables.USERS)) == {"dynamodb:GetItem"}
    # It sweeps deleted agents' user storage: found through the keys-only index, deleted
    # key by key; it can neither read a value nor write an item.
    storage = synth.table_id(tables.USER_STORAGE)
    assert t.grants_on(RUNNER, storage) == {
        ("dynamodb:Query", f"<{storage}.Arn>/index/by_registration"),
        ("dynamodb:DeleteItem", f"<{storage}.Arn>")}
    # It counts each LLM call's tokens against the user's and the agent's daily budgets.
    assert t.actions_on(RUNNER, synth.table_id(tables.USAGE)) == set(
        RUNNER_TABLES[tables.USAGE.logical])
    assert t.actions_on(RUNNER, embeds_bucket_id(synth)) == {
        "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    # It runs corpus ingestions: their versions, and their indexes under corpora/ only.
    assert t.actions_on(RUNNER, synth.table_id(tables.CORPORA)) == set(
        RUNNER_TABLES[tables.CORPORA.logical])
    # (deleting those a newer version replaced)
    assert corpus_grants(t, RUNNER) == [{"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}]
    queue = t.env(API)["CODESHOT_QUEUE_URL"]["Ref"]
    prompts = t.env(RUNNER)["CODESHOT_PROMPT_QUEUE_URL"]["Ref"]
    # It consumes both queues; it sends a callback's answer to the session queue and the
    # next poll to the prompt queue, and nothing anywhere else.
    assert t.actions_on(RUNNER, queue) >= SQS_CONSUME | {"sqs:SendMessage"}
    assert t.actions_on(RUNNER, prompts) >= SQS_CONSUME | {"sqs:SendMessage"}
    assert {r for g in t.grants(RUNNER) if "sqs:SendMessage" in g.actions
            for r in g.targets()} == {queue, prompts}
    assert_reads_only_the_signing_secret(synth, RUNNER, {"secretsmanager:GetSecretValue"})
    assert "foundation-model/anthropic.claude-haiku-4-5-20251001-v1:0" in invoked_models(
        t, RUNNER)


def test_register_agent_role(synth):
    t = synth.platform
    assert_reads_only_the_signing_secret(synth, REGISTER)
    # Single items, no Query or Scan: an agent's registration, and its owner made once.
    assert t.actions_on(REGISTER, synth.table_id(tables.REGISTRY)) == {
        "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    assert t.actions_on(REGISTER, synth.table_id(tables.USERS)) == {
        "dynamodb:GetItem", "dynamodb:PutItem"}
    for spec in (tables.USAGE, tables.USER_STORAGE):
        assert not t.actions_on(REGISTER, synth.table_id(spec))
    # It marks a new stack's sessions table (its Custom::CodeshotRepliesHeld): the mark's
    # item alone, put; no read of the table.
    sessions = synth.table_id(tables.SESSIONS)
    mark = {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": ["#replies-held"]}}
    assert {(a, json.dumps(g.condition)) for g in t.grants(REGISTER)
            if sessions in g.targets() for a in g.actions} == {
        ("dynamodb:PutItem", json.dumps(mark))}
    # Users' OAuth tokens for an agent it (un)registers: found through the keys-only
    # index, deleted key by key; it can neither read a token nor write an item.
    oauth = synth.table_id(tables.OAUTH)
    assert t.grants_on(REGISTER, oauth) == {
        ("dynamodb:Query", f"<{oauth}.Arn>/index/by_agent"),
        ("dynamodb:DeleteItem", f"<{oauth}.Arn>")}
    # A deployed agent's corpora: it records and queues their ingestion, nothing more.
    assert t.actions_on(REGISTER, synth.table_id(tables.CORPORA)) == {
        "dynamodb:Query", "dynamodb:PutItem", "dynamodb:DeleteItem"}
    assert {a for a in t.all_actions(REGISTER) if a.startswith("sqs:")} == {"sqs:SendMessage"}
    # An unregistered agent's corpus indexes go; it reads and writes no object.
    assert {a for a in t.all_actions(REGISTER) if a.startswith("s3:")} == {"s3:DeleteObject"}
    assert corpus_grants(t, REGISTER) == [{"s3:DeleteObject"}]


def corpus_grants(t, handler: str) -> list[set[str]]:
    """The S3 actions of each grant on corpus index objects (corpora/*, nothing wider; CDK
    may merge it with the same actions on embeds/*)."""
    grants = [g for g in t.grants(handler) if any(a.startswith("s3:") for a in g.actions)
              and any("corpora/" in r for r in g.resource_texts())]
    for grant in grants:
        assert all(r.endswith(("/corpora/*", "/embeds/*")) for r in grant.resource_texts()), \
            grant
    return [set(g.actions) for g in grants]


@pytest.mark.parametrize("handler", [API, RUNNER, REGISTER])
def test_no_wildcards_but_x_ray(synth, handler):
    for grant in synth.platform.grants(handler):
        assert not any(a == "*" or a.endswith(":*") for a in grant.actions), grant
        if "*" in grant.resources:
            assert grant.actions == {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
        logs = [a for a in grant.actions if a.startswith("logs:")]
        if logs:  # only its own log group, never any group
            assert len(grant.resources) == 1 and "Fn::GetAtt" in grant.resources[0]


def test_corpora_search_in_s3_vectors_when_set(synth, tmp_path):
    from tests.infra.conftest import synthesize

    assert not synth.platform.of_type("AWS::S3Vectors::VectorBucket")  # the default: lambda
    assert "CODESHOT_CORPUS_SEARCH" not in synth.platform.env(RUNNER)
    platform = synthesize(tmp_path, **{"codeshot:corpusSearch": "s3vectors"}).platform
    [bucket] = platform.of_type("AWS::S3Vectors::VectorBucket").values()
    assert bucket["Properties"]["EncryptionConfiguration"] == {"SseType": "AES256"}
    env = platform.env(RUNNER)
    assert env["CODESHOT_CORPUS_SEARCH"] == "s3vectors"
    assert cfn.text(env["CODESHOT_CORPUS_VECTOR_BUCKET"]) == cfn.text(
        bucket["Properties"]["VectorBucketName"])
    vectors = {a for a in platform.all_actions(RUNNER) if a.startswith("s3vectors:")}
    assert vectors == {"s3vectors:CreateIndex", "s3vectors:PutVectors",
                       "s3vectors:QueryVectors", "s3vectors:GetVectors",
                       "s3vectors:DeleteIndex"}  # a version's once a newer one is ready
    # The functions that delete agents delete their last indexes, and do nothing else there.
    for handler in (API, REGISTER):
        assert {a for a in platform.all_actions(handler) if a.startswith("s3vectors:")} == {
            "s3vectors:DeleteIndex"}
        assert platform.env(handler)["CODESHOT_CORPUS_SEARCH"] == "s3vectors"
        assert cfn.text(platform.env(handler)["CODESHOT_CORPUS_VECTOR_BUCKET"]) == cfn.text(
            bucket["Properties"]["VectorBucketName"])
    # Only on this bucket's indexes (and the bucket itself).
    for handler in (RUNNER, API, REGISTER):
        [grant] = [g for g in platform.grants(handler) if "s3vectors:DeleteIndex" in g.actions]
        assert sorted("bucket/" + r.split(":bucket/", 1)[-1]
                      for r in grant.resource_texts()) == [
            f"bucket/{cfn.text(bucket['Properties']['VectorBucketName'])}",
            f"bucket/{cfn.text(bucket['Properties']['VectorBucketName'])}/index/*"]
    with pytest.raises(ValueError, match="codeshot:corpusSearch"):
        synthesize(tmp_path / "bad", **{"codeshot:corpusSearch": "pinecone"})


@pytest.mark.parametrize("function", PLATFORM_FUNCTIONS, ids=lambda f: f.name)
def test_a_function_that_reaches_s3_is_told_the_bucket(synth, function):
    """Without CODESHOT_EMBEDS_BUCKET a function reads the setting's default name, a bucket
    of no one's deploy: the register function deleting an agent's corpus objects did."""
    env = synth.platform.env(function.handler)
    assert ("CODESHOT_EMBEDS_BUCKET" in env) == ("s3" in function.aws_services), env
