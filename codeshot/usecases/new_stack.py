"""A new stack's sessions table marked as holding every reply's embeds (``HELD#`` items,
:meth:`SessionStore.replies_held`), so that erasures delete embeds' objects with no
operator step.

The platform stack's ``Custom::CodeshotRepliesHeld`` resource, served by the registration
function, marks the table only while CloudFormation creates the stack: every resource is
then new, the sessions table too, and only code that writes ``HELD#`` items ever writes
to it. Added to a stack deployed before (its create event comes during an update), it
marks nothing: that table may hold replies of before, for the operator's backfill
(`codeshot users hold-replies`). No role needs to read the table's keys (a Scan) to tell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from codeshot import aws

if TYPE_CHECKING:  # infra reads RESOURCE_TYPE: the services stay unimported at synth
    from codeshot.services import Services

RESOURCE_TYPE = "Custom::CodeshotRepliesHeld"
# One physical id for good: an update never replaces the resource (nor marks anything).
PHYSICAL_ID = "codeshot-replies-held"
# The stack's status while CloudFormation creates it (a change set's execution too).
CREATING = "CREATE_IN_PROGRESS"


def hold_new_stack_replies(services: Services, event: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The resource's answer to a CloudFormation event: (physical id, data). Any event but
    a delete asks the stack's status (its role may describe that stack alone) and marks
    the table if the stack is being created; ``Marked`` says whether it did."""
    if event["RequestType"] == "Delete":  # the mark goes with its table
        # The id CloudFormation holds: a failed create's (answered by the handler) too.
        return event.get("PhysicalResourceId") or PHYSICAL_ID, {}
    cloudformation = aws.client("cloudformation", services.settings)
    (stack,) = cloudformation.describe_stacks(StackName=event["StackId"])["Stacks"]
    new = stack["StackStatus"] == CREATING
    if new:
        services.sessions.mark_replies_held()
    return PHYSICAL_ID, {"Marked": "true" if new else "false"}
