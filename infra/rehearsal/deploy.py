"""Standing a cloud assembly up locally: what CloudFormation would create, resource by
resource, from the templates' own properties.

Data resources (tables, buckets, queues, secrets) are created in moto's server; functions
become :class:`~infra.rehearsal.lambdas.Function` s whose roles are registered with the
IAM proxy; HTTP APIs become front doors; the SQS event source mapping becomes a poller
that invokes its function as Lambda's would; custom resources are delivered as
CloudFormation events whose answers come back to a response URL served here. Resource
types with nothing to run locally (log groups, alarms ...) are listed, not emulated.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from infra.rehearsal.assembly import (
    ACCOUNT,
    PARTITION,
    REGION,
    Deployed,
    RehearsalError,
    Resolver,
    Stack,
    stack_id,
)
from infra.rehearsal.aws_proxy import AwsProxy, Principal, queue_arn
from infra.rehearsal.front_door import FrontDoor, Route
from infra.rehearsal.lambdas import Function, FunctionError, FunctionSpec, Lambdas
from infra.rehearsal.loopback import LoopbackServer, reply

# Types CloudFormation creates that run nothing the rehearsal could exercise.
NOT_EMULATED = {"AWS::CloudWatch::Alarm", "AWS::CDK::Metadata", "AWS::ApiGatewayV2::Stage"}
CUSTOM_RESOURCE_TIMEOUT_S = 300.0


def physical_name(stack: str, logical_id: str, limit: int, lower: bool = False) -> str:
    """CloudFormation's generated names: ``<stack>-<logical id>-<random>``."""
    suffix = secrets.token_hex(6).upper()
    name = f"{stack}-{logical_id}"[: limit - len(suffix) - 1] + "-" + suffix
    return name.lower() if lower else name


class ResponseServer:
    """The ResponseURL of custom resource events: answers are PUT here."""

    def __init__(self) -> None:
        self.answers: dict[str, dict[str, Any]] = {}
        self.arrived: dict[str, threading.Event] = {}
        self.loopback = LoopbackServer(self._answer)
        self.url = f"{self.loopback.url}/cloudformation-response"

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        request_id = request.path.rsplit("/", 1)[-1]
        if request.command == "PUT":
            self.answers[request_id] = json.loads(body or b"{}")
            self.arrived.setdefault(request_id, threading.Event()).set()
        reply(request, 200 if request.command == "PUT" else 405, b"")

    def expect(self, request_id: str) -> str:
        self.arrived[request_id] = threading.Event()
        return f"{self.url}/{request_id}"

    def wait(self, request_id: str, timeout: float) -> dict[str, Any] | None:
        if not self.arrived[request_id].wait(timeout):
            return None
        return self.answers[request_id]

    def stop(self) -> None:
        self.loopback.stop()


@dataclass
class EventSourceMapping:
    """Lambda's SQS poller: batches of at most BatchSize, partial failures reported."""

    queue_url: str
    queue_arn: str
    function: Function
    batch_size: int
    report_failures: bool
    sqs: Any  # a client signed as the function's role
    stop_flag: threading.Event = field(default_factory=threading.Event)
    batches: int = 0
    errors: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.sqs.get_queue_attributes(QueueUrl=self.queue_url, AttributeNames=["QueueArn"])
        threading.Thread(target=self._poll, daemon=True).start()

    def _poll(self) -> None:
        while not self.stop_flag.is_set():
            try:
                messages = self.sqs.receive_message(
                    QueueUrl=self.queue_url, MaxNumberOfMessages=min(self.batch_size, 10),
                    WaitTimeSeconds=1, AttributeNames=["All"],
                    MessageAttributeNames=["All"]).get("Messages", [])
            except Exception as exc:  # an IAM denial lands in the proxy's log too
                self.errors.append(f"ReceiveMessage: {exc}")
                time.sleep(0.5)
                continue
            if messages:
                self._deliver(messages)

    def _deliver(self, messages: list[dict[str, Any]]) -> None:
        self.batches += 1
        event = {"Records": [{
            "messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"],
            "body": m["Body"], "attributes": m.get("Attributes", {}),
            "messageAttributes": m.get("MessageAttributes", {}), "md5OfBody": m["MD5OfBody"],
            "eventSource": "aws:sqs", "eventSourceARN": self.queue_arn, "awsRegion": REGION,
        } for m in messages]}
        try:
            result = self.function.invoke(event)
        except FunctionError as exc:  # the whole batch failed: SQS redelivers it later
            self.errors.append(str(exc))
            return
        failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])} \
            if self.report_failures else set()
        for message in messages:
            if message["MessageId"] not in failed:
                self.sqs.delete_message(QueueUrl=self.queue_url,
                                        ReceiptHandle=message["ReceiptHandle"])


class Deployment:
    """Every stack of an assembly, created in moto and run locally."""

    def __init__(self, moto_url: str, proxy: AwsProxy, lambdas: Lambdas,
                 responses: ResponseServer, aws: Callable[..., Any]) -> None:
        self.moto_url, self.proxy, self.lambdas = moto_url, proxy, lambdas
        self.responses = responses
        self.aws = aws  # aws(service, access_key=None): a boto3 client (admin or a role)
        self.stacks: dict[str, Deployed] = {}
        self.front_doors: dict[str, FrontDoor] = {}
        self.mappings: list[EventSourceMapping] = []
        self.role_policies: dict[str, list[dict[str, Any]]] = {}
        self.secret_arns: dict[str, str] = {}
        self.not_emulated: dict[str, int] = {}
        self.notes: list[str] = []
        self._integrations: dict[str, tuple[Function, str]] = {}
        self._routed: list[tuple[str, str, Function]] = []

    # -- stacks -------------------------------------------------------------------------
    def exports(self) -> dict[str, Any]:
        return {k: v for d in self.stacks.values() for k, v in d.exports.items()}

    def deploy(self, stack: Stack) -> Deployed:
        deployed = Deployed(stack)
        self.stacks[stack.name] = deployed
        # What its custom resources find when they describe it (codeshot/usecases/new_stack.py)
        self.proxy.stack_statuses[stack_id(stack.name)] = "CREATE_IN_PROGRESS"
        resolve = Resolver(deployed, lambda name: self.stacks[name], self.exports)
        for logical_id in stack.creation_order():
            resource = stack.resources[logical_id]
            kind = resource["Type"]
            props = resolve(resource.get("Properties", {}))
            create = getattr(self, "_" + kind.replace("::", "_").replace("-", "_"), None)
            if kind.startswith("Custom::") or kind == "AWS::CloudFormation::CustomResource":
                create = self._custom_resource
            if create is None:
                if kind not in NOT_EMULATED:
                    self.not_emulated[kind] = self.not_emulated.get(kind, 0) + 1
                deployed.refs[logical_id] = physical_name(stack.name, logical_id, 64)
                continue
            ref, attributes = create(stack, logical_id, props)
            deployed.refs[logical_id] = ref
            for name, value in attributes.items():
                deployed.attributes[(logical_id, name)] = value
        for name, output in stack.template.get("Outputs", {}).items():
            value = resolve(output["Value"])
            deployed.outputs[name] = value
            if "Export" in output:
                deployed.exports[resolve(output["Export"]["Name"])] = value
        self._check_api_permissions(stack, deployed)
        self.proxy.stack_statuses[stack_id(stack.name)] = "CREATE_COMPLETE"
        return deployed

    def destroy(self, stack: Stack) -> list[str]:
        """What ``cdk destroy`` does that runs code (custom resources' Delete events, in
        reverse order); returns the resources CloudFormation would keep (Retain)."""
        deployed = self.stacks[stack.name]
        for logical_id in reversed(stack.creation_order()):
            resource = stack.resources[logical_id]
            kind = resource["Type"]
            if kind.startswith("Custom::"):
                props = Resolver(deployed, lambda n: self.stacks[n], self.exports)(
                    resource.get("Properties", {}))
                self.custom_resource_event(stack, logical_id, kind, props, "Delete",
                                           deployed.refs[logical_id])
        return [f"{stack.name}/{k} ({v['Type']})" for k, v in stack.resources.items()
                if v.get("DeletionPolicy") in ("Retain", "RetainExceptOnCreate")]

    def stop(self) -> None:
        for mapping in self.mappings:
            mapping.stop_flag.set()
        for door in self.front_doors.values():
            door.stop()

    # -- data ---------------------------------------------------------------------------
    def _AWS_DynamoDB_Table(self, stack: Stack, logical_id: str, props: dict[str, Any]
                            ) -> tuple[str, dict[str, Any]]:
        db = self.aws("dynamodb")
        name = props.get("TableName") or physical_name(stack.name, logical_id, 255)
        kwargs: dict[str, Any] = {
            "TableName": name, "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
            "BillingMode": props.get("BillingMode", "PROVISIONED"),
        }
        for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "ProvisionedThroughput",
                    "StreamSpecification", "DeletionProtectionEnabled", "TableClass"):
            if key in props:
                kwargs[key] = props[key]
        if "SSESpecification" in props:
            sse = props["SSESpecification"]
            kwargs["SSESpecification"] = {"Enabled": bool(sse.get("SSEEnabled"))} | (
                {"SSEType": sse["SSEType"]} if "SSEType" in sse else {})
        db.create_table(**kwargs)
        self.proxy.add_table(name, props["KeySchema"])
        if "TimeToLiveSpecification" in props:
            db.update_time_to_live(TableName=name,
                                   TimeToLiveSpecification=props["TimeToLiveSpecification"])
        pitr = props.get("PointInTimeRecoverySpecification", {})
        if pitr.get("PointInTimeRecoveryEnabled"):
            db.update_continuous_backups(
                TableName=name,
                PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True})
        arn = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
        return name, {"Arn": arn, "StreamArn": f"{arn}/stream/rehearsal"}

    def _AWS_S3_Bucket(self, stack: Stack, logical_id: str, props: dict[str, Any]
                       ) -> tuple[str, dict[str, Any]]:
        s3 = self.aws("s3")
        name = props.get("BucketName") or physical_name(stack.name, logical_id, 63, lower=True)
        s3.create_bucket(Bucket=name)
        if "PublicAccessBlockConfiguration" in props:
            s3.put_public_access_block(
                Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"])
        if "BucketEncryption" in props:
            s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": [
                {"ApplyServerSideEncryptionByDefault": r["ServerSideEncryptionByDefault"]}
                | ({"BucketKeyEnabled": r["BucketKeyEnabled"]} if "BucketKeyEnabled" in r else {})
                for r in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]]})
        if "VersioningConfiguration" in props:
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={
                "Status": props["VersioningConfiguration"]["Status"]})
        if "OwnershipControls" in props:
            s3.put_bucket_ownership_controls(Bucket=name,
                                             OwnershipControls=props["OwnershipControls"])
        if "LifecycleConfiguration" in props:
            s3.put_bucket_lifecycle_configuration(Bucket=name, LifecycleConfiguration={
                "Rules": [_lifecycle_rule(r, i) for i, r in
                          enumerate(props["LifecycleConfiguration"]["Rules"])]})
        logging_config = props.get("LoggingConfiguration")
        if logging_config:
            try:
                s3.put_bucket_logging(Bucket=name, BucketLoggingStatus={"LoggingEnabled": {
                    "TargetBucket": logging_config["DestinationBucketName"],
                    "TargetPrefix": logging_config.get("LogFilePrefix", "")}})
            except s3.exceptions.ClientError as exc:  # moto wants the ACL grant, not a policy
                self.notes.append(f"{stack.name}/{logical_id}: access logging not emulated "
                                  f"({exc.response['Error']['Code']})")
        return name, {"Arn": f"arn:{PARTITION}:s3:::{name}",
                      "DomainName": f"{name}.s3.amazonaws.com",
                      "RegionalDomainName": f"{name}.s3.{REGION}.amazonaws.com"}

    def _AWS_S3_BucketPolicy(self, stack: Stack, logical_id: str, props: dict[str, Any]
                             ) -> tuple[str, dict[str, Any]]:
        document = props["PolicyDocument"]
        self._resource_policy(stack, logical_id, f"arn:{PARTITION}:s3:::{props['Bucket']}",
                              document)
        # moto enforces a bucket policy's Deny statements on object requests, reading no
        # condition: a conditional one would deny everything. The proxy evaluates them.
        unconditional = [st for st in document["Statement"]
                         if not (st["Effect"] == "Deny" and st.get("Condition"))]
        if unconditional:
            self.aws("s3").put_bucket_policy(Bucket=props["Bucket"], Policy=json.dumps(
                document | {"Statement": unconditional}))
        return physical_name(stack.name, logical_id, 64), {}

    def _resource_policy(self, stack: Stack, logical_id: str, arn: str,
                         document: dict[str, Any]) -> None:
        """The proxy evaluates its Deny statements, conditions included."""
        self.proxy.add_resource_policy(arn, document)
        allows = [st.get("Sid") or "no Sid" for st in document["Statement"]
                  if st["Effect"] == "Allow"]
        if allows:
            self.notes.append(f"{stack.name}/{logical_id}: its Allow statements "
                              f"({', '.join(allows)}) are not evaluated (only the roles' "
                              "policies grant in the rehearsal)")

    def _AWS_SQS_Queue(self, stack: Stack, logical_id: str, props: dict[str, Any]
                       ) -> tuple[str, dict[str, Any]]:
        fifo = bool(props.get("FifoQueue"))
        name = props.get("QueueName") or (
            physical_name(stack.name, logical_id, 80 - 5 * fifo) + (".fifo" if fifo else ""))
        attributes = {key: (json.dumps(value) if isinstance(value, dict) else
                            str(value).lower() if isinstance(value, bool) else str(value))
                      for key, value in props.items() if key not in ("QueueName", "Tags")}
        url = self.aws("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{name}"
        return url, {"Arn": arn, "QueueName": name, "QueueUrl": url}

    def _AWS_SQS_QueuePolicy(self, stack: Stack, logical_id: str, props: dict[str, Any]
                             ) -> tuple[str, dict[str, Any]]:
        for url in props["Queues"]:
            self.aws("sqs").set_queue_attributes(
                QueueUrl=url, Attributes={"Policy": json.dumps(props["PolicyDocument"])})
            self._resource_policy(stack, logical_id, queue_arn(url), props["PolicyDocument"])
        return physical_name(stack.name, logical_id, 64), {}

    def _AWS_KMS_Key(self, stack: Stack, logical_id: str, props: dict[str, Any]
                     ) -> tuple[str, dict[str, Any]]:
        """A key as CloudFormation makes it (the alarm topic's: its ARN is the topic's)."""
        key = self.aws("kms").create_key(Description=props.get("Description", ""),
                                         Policy=json.dumps(props["KeyPolicy"]))["KeyMetadata"]
        return key["KeyId"], {"Arn": key["Arn"], "KeyId": key["KeyId"]}

    def _AWS_SecretsManager_Secret(self, stack: Stack, logical_id: str, props: dict[str, Any]
                                   ) -> tuple[str, dict[str, Any]]:
        client = self.aws("secretsmanager")
        name = props.get("Name") or physical_name("", logical_id, 64).lstrip("-")
        value = props.get("SecretString")
        generate = props.get("GenerateSecretString")
        if generate is not None:  # what CloudFormation does, with the same options
            options = {k: v for k, v in generate.items()
                       if k in ("PasswordLength", "ExcludeCharacters", "ExcludeNumbers",
                                "ExcludePunctuation", "ExcludeUppercase", "ExcludeLowercase",
                                "IncludeSpace", "RequireEachIncludedType")}
            password = client.get_random_password(**options)["RandomPassword"]
            if "GenerateStringKey" in generate:
                value = json.dumps(json.loads(generate.get("SecretStringTemplate", "{}"))
                                   | {generate["GenerateStringKey"]: password})
            else:
                value = password
        kwargs = {"Name": name, "Description": props.get("Description", "")}
        if value is not None:
            kwargs["SecretString"] = value
        arn = client.create_secret(**kwargs)["ARN"]
        self.secret_arns[name] = arn
        return arn, {"Id": arn}

    def _AWS_Cognito_UserPool(self, stack: Stack, logical_id: str, props: dict[str, Any]
                              ) -> tuple[str, dict[str, Any]]:
        """The accounts' pool, with the template's sign-in and password rules."""
        keys = ("UsernameAttributes", "AutoVerifiedAttributes", "MfaConfiguration", "Policies")
        pool = self.aws("cognito-idp").create_user_pool(
            PoolName=props.get("UserPoolName") or physical_name(stack.name, logical_id, 128),
            **{k: props[k] for k in keys if k in props})["UserPool"]
        return pool["Id"], {"Arn": pool["Arn"], "ProviderName": pool["Id"]}

    def _AWS_Cognito_UserPoolClient(self, stack: Stack, logical_id: str,
                                    props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        keys = ("ExplicitAuthFlows", "GenerateSecret", "PreventUserExistenceErrors")
        client = self.aws("cognito-idp").create_user_pool_client(
            UserPoolId=props["UserPoolId"],
            ClientName=props.get("ClientName") or physical_name(stack.name, logical_id, 128),
            **{k: props[k] for k in keys if k in props})["UserPoolClient"]
        return client["ClientId"], {}

    def _AWS_Logs_LogGroup(self, stack: Stack, logical_id: str, props: dict[str, Any]
                           ) -> tuple[str, dict[str, Any]]:
        """Named only: function output goes to files under the rehearsal's logs/."""
        name = props.get("LogGroupName") or physical_name(stack.name, logical_id, 512)
        return name, {"Arn": f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{name}:*"}

    # -- IAM ----------------------------------------------------------------------------
    def _AWS_IAM_Role(self, stack: Stack, logical_id: str, props: dict[str, Any]
                      ) -> tuple[str, dict[str, Any]]:
        name = props.get("RoleName") or physical_name(stack.name, logical_id, 64)
        documents = self.role_policies.setdefault(name, [])
        documents.extend(p["PolicyDocument"] for p in props.get("Policies", []))
        if props.get("ManagedPolicyArns"):
            self.notes.append(f"{stack.name}/{logical_id}: managed policies "
                              f"{props['ManagedPolicyArns']} are not evaluated")
        return name, {"Arn": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{name}",
                      "RoleId": "AROA" + secrets.token_hex(8).upper()}

    def _AWS_IAM_Policy(self, stack: Stack, logical_id: str, props: dict[str, Any]
                        ) -> tuple[str, dict[str, Any]]:
        for role in props.get("Roles", []):
            self.role_policies.setdefault(role, []).append(props["PolicyDocument"])
        return physical_name(stack.name, logical_id, 64), {}

    def principal(self, name: str, role_arn: str) -> str:
        """A new access key signing as ``role_arn`` (its policies as they stand)."""
        role = role_arn.rsplit("/", 1)[-1]
        key = "ASIA" + secrets.token_hex(8).upper()
        self.proxy.add_principal(key, Principal(name, role,
                                                self.role_policies.setdefault(role, [])))
        return key

    # -- compute ------------------------------------------------------------------------
    def _AWS_Lambda_Function(self, stack: Stack, logical_id: str, props: dict[str, Any]
                             ) -> tuple[str, dict[str, Any]]:
        name = props.get("FunctionName") or physical_name(stack.name, logical_id, 64)
        key = props["Code"].get("S3Key", "")
        if key not in stack.assets:
            raise RehearsalError(f"{stack.name}/{logical_id}: code {key!r} is not an asset of "
                                 "this assembly (was it bundled?)")
        handler = props["Handler"]
        display = function_display_name(stack.name, handler)
        spec = FunctionSpec(
            name=display, physical_name=name, asset=stack.assets[key], handler=handler,
            runtime=props["Runtime"], memory_mb=int(props.get("MemorySize", 128)),
            timeout_s=float(props.get("Timeout", 3)),
            environment={k: str(v) for k, v in
                         props.get("Environment", {}).get("Variables", {}).items()},
            role=props["Role"].rsplit("/", 1)[-1],
            access_key=self.principal(display, props["Role"]),
            log_group=str(props.get("LoggingConfig", {}).get("LogGroup", "")),
        )
        self.lambdas.add(spec)
        return name, {"Arn": spec.arn}

    def _AWS_Lambda_Permission(self, stack: Stack, logical_id: str, props: dict[str, Any]
                               ) -> tuple[str, dict[str, Any]]:
        return physical_name(stack.name, logical_id, 64), {}

    def _AWS_Lambda_EventSourceMapping(self, stack: Stack, logical_id: str,
                                       props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        function = self.lambdas.by_arn(props["FunctionName"])
        source = props["EventSourceArn"]
        if ":sqs:" not in source:
            raise RehearsalError(f"{stack.name}/{logical_id}: only SQS event sources are "
                                 "rehearsed")
        queue_name = source.rsplit(":", 1)[-1]
        admin_sqs = self.aws("sqs")
        url = admin_sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
        role_arn = f"arn:{PARTITION}:iam::{ACCOUNT}:role/{function.spec.role}"
        mapping = EventSourceMapping(
            url, source, function, int(props.get("BatchSize", 10)),
            "ReportBatchItemFailures" in props.get("FunctionResponseTypes", []),
            self.aws("sqs", access_key=self.principal(
                f"{function.spec.name} (event source)", role_arn)))
        if props.get("Enabled", True):
            mapping.start()
            self.mappings.append(mapping)
        return str(uuid.uuid4()), {}

    # -- HTTP APIs ------------------------------------------------------------------------
    def _AWS_ApiGatewayV2_Api(self, stack: Stack, logical_id: str, props: dict[str, Any]
                              ) -> tuple[str, dict[str, Any]]:
        if props.get("ProtocolType") != "HTTP":
            raise RehearsalError(f"{stack.name}/{logical_id}: only HTTP APIs are rehearsed")
        api_id = secrets.token_hex(5)
        door = FrontDoor(api_id)
        self.front_doors[api_id] = door
        return api_id, {"ApiEndpoint": door.url, "ApiId": api_id}

    def _AWS_ApiGatewayV2_Integration(self, stack: Stack, logical_id: str,
                                      props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if props.get("IntegrationType") != "AWS_PROXY":
            raise RehearsalError(f"{stack.name}/{logical_id}: only Lambda proxy integrations")
        uri = props["IntegrationUri"]
        arn = uri.split("/functions/")[1].removesuffix("/invocations") if "/functions/" in uri \
            else uri
        integration_id = secrets.token_hex(4)
        self._integrations[integration_id] = (self.lambdas.by_arn(arn),
                                              str(props.get("PayloadFormatVersion", "1.0")))
        return integration_id, {}

    def _AWS_ApiGatewayV2_Route(self, stack: Stack, logical_id: str, props: dict[str, Any]
                                ) -> tuple[str, dict[str, Any]]:
        function, version = self._integrations[props["Target"].split("/", 1)[1]]
        if version != "2.0":
            raise RehearsalError(f"{stack.name}/{logical_id}: payload format {version}; the "
                                 "functions are written for 2.0")
        self.front_doors[props["ApiId"]].add_route(Route(props["RouteKey"], function.invoke,
                                                         version))
        self._routed.append((stack.name, props["ApiId"], function))
        return secrets.token_hex(4), {}

    def _check_api_permissions(self, stack: Stack, deployed: Deployed) -> None:
        """API Gateway can invoke a function only with a lambda:InvokeFunction permission
        for apigateway.amazonaws.com on it, scoped to the API."""
        resolve = Resolver(deployed, lambda n: self.stacks[n], self.exports)
        permissions = [resolve(p.get("Properties", {}))
                       for p in stack.of_type("AWS::Lambda::Permission").values()]
        for stack_name, api_id, function in self._routed:
            if stack_name != stack.name:
                continue
            ok = any(p.get("Principal") == "apigateway.amazonaws.com"
                     and p.get("Action") == "lambda:InvokeFunction"
                     and p.get("FunctionName") in (function.spec.arn, function.spec.physical_name)
                     and f":{api_id}/" in str(p.get("SourceArn", f":{api_id}/"))
                     for p in permissions)
            if not ok:
                raise RehearsalError(f"{stack.name}: API {api_id} routes to {function.spec.name} "
                                     "but nothing lets apigateway.amazonaws.com invoke it")

    # -- custom resources -----------------------------------------------------------------
    def _custom_resource(self, stack: Stack, logical_id: str, props: dict[str, Any]
                         ) -> tuple[str, dict[str, Any]]:
        kind = stack.resources[logical_id]["Type"]
        physical_id, data = self.custom_resource_event(stack, logical_id, kind, props, "Create")
        return physical_id, data

    def custom_resource_event(self, stack: Stack, logical_id: str, kind: str,
                              props: dict[str, Any], request_type: str,
                              physical_id: str | None = None,
                              old_props: dict[str, Any] | None = None
                              ) -> tuple[str, dict[str, Any]]:
        """Deliver one CloudFormation event to the ServiceToken function and wait for the
        answer at the response URL, as CloudFormation does."""
        function = self.lambdas.by_arn(props["ServiceToken"])
        request_id = str(uuid.uuid4())
        event: dict[str, Any] = {
            "RequestType": request_type, "ServiceToken": props["ServiceToken"],
            "ResponseURL": self.responses.expect(request_id),
            "StackId": stack_id(stack.name),
            "RequestId": request_id, "LogicalResourceId": logical_id, "ResourceType": kind,
            "ResourceProperties": props,
        }
        if physical_id is not None:
            event["PhysicalResourceId"] = physical_id
        if old_props is not None:
            event["OldResourceProperties"] = old_props
        try:
            function.invoke(event)
        except FunctionError as exc:
            raise RehearsalError(f"{stack.name}/{logical_id} {request_type}: the handler failed "
                                 f"without answering CloudFormation (a stack would hang for "
                                 f"an hour): {exc}") from exc
        answer = self.responses.wait(request_id, CUSTOM_RESOURCE_TIMEOUT_S)
        if answer is None:
            raise RehearsalError(f"{stack.name}/{logical_id} {request_type}: no answer at the "
                                 "response URL")
        if answer.get("Status") != "SUCCESS":
            raise RehearsalError(f"{stack.name}/{logical_id} {request_type} FAILED: "
                                 f"{answer.get('Reason')}")
        return str(answer.get("PhysicalResourceId") or physical_id), answer.get("Data") or {}


def function_display_name(stack: str, handler: str) -> str:
    """api, runner, register for the platform's handlers; agent:<stack suffix> for agents."""
    known = {"handlers.api.handler": "api", "handlers.runner.handler": "runner",
             "handlers.register_agent.handler": "register"}
    if handler in known:
        return known[handler]
    return "agent:" + stack.split("Agent-", 1)[-1]


def _lifecycle_rule(rule: dict[str, Any], index: int) -> dict[str, Any]:
    """A CloudFormation lifecycle rule in the S3 API's shape."""
    out: dict[str, Any] = {"ID": rule.get("Id", f"rule-{index}"), "Status": rule["Status"],
                           "Filter": {"Prefix": rule.get("Prefix", "")}}
    if "ExpirationInDays" in rule:
        out["Expiration"] = {"Days": rule["ExpirationInDays"]}
    if "NoncurrentVersionExpiration" in rule:
        out["NoncurrentVersionExpiration"] = {
            "NoncurrentDays": rule["NoncurrentVersionExpiration"]["NoncurrentDays"]}
    if "AbortIncompleteMultipartUpload" in rule:
        out["AbortIncompleteMultipartUpload"] = rule["AbortIncompleteMultipartUpload"]
    return out
