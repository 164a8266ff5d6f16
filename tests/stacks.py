"""CloudFormation stacks as a custom resource sees them while CloudFormation waits for it,
on moto in-process: moto creates and updates a stack at once, so a stack *being* created
(or updated) is a stack moto made, with that status set on moto's own record of it."""

from __future__ import annotations

import json

from moto.cloudformation.models import cloudformation_backends
from moto.core import DEFAULT_ACCOUNT_ID

from codeshot import aws, ids
from codeshot.settings import Settings

CREATING, UPDATING = "CREATE_IN_PROGRESS", "UPDATE_IN_PROGRESS"


def stack_in(settings: Settings, status: str) -> str:
    """The id (ARN) of a new stack of moto's whose status is ``status``."""
    made = aws.client("cloudformation", settings).create_stack(
        StackName=f"codeshot-{ids.ulid().lower()[-8:]}", TemplateBody=json.dumps(
            {"Resources": {"Alarms": {"Type": "AWS::SNS::Topic"}}}))["StackId"]
    now_in(settings, made, status)
    return str(made)


def now_in(settings: Settings, stack_id: str, status: str) -> None:
    """CloudFormation has moved on: the stack's status is now ``status``."""
    cloudformation_backends[DEFAULT_ACCOUNT_ID][settings.region].stacks[stack_id].status = status


def replies_held_event(stack_id: str, kind: str = "Create") -> dict[str, object]:
    """CloudFormation's event for the platform stack's Custom::CodeshotRepliesHeld."""
    from codeshot.usecases.new_stack import RESOURCE_TYPE

    return {"RequestType": kind, "ResourceType": RESOURCE_TYPE, "StackId": stack_id,
            "RequestId": "req-1", "LogicalResourceId": "RepliesHeld",
            "ResponseURL": "http://127.0.0.1:9/unused", "ResourceProperties": {}}
