"""``make rehearse``: what ``cdk deploy`` would ship, run on this machine from cdk.out alone.

No AWS account and no Docker. The app is synthesized with the same bundling code for this
machine's CPU (and the template's Python where the machine has it), then every resource
of every stack is created in moto's server from the template's own properties, every
Lambda function runs from its own asset directory in its own processes (AWS's runtime
interface client, ``awslambdaric``, against a local Lambda Runtime API) with exactly the
template's handler and environment, and each AWS call a function makes passes an IAM
check against that function's role policy from the template, conditions included. HTTP
APIs, the SQS event source mapping and custom resources deliver the events AWS would.
End-to-end checks then drive the deployment as its users would (``codeshot chat``, the
Fixie 1.0 client, agent registration, user storage from an agent, embeds) and the
printout reports bundle sizes, cold starts and AWS calls per query.

Modules: :mod:`.assembly` (cdk.out, intrinsic functions), :mod:`.aws_proxy` (IAM checks
and call counts in front of moto), :mod:`.request_context` (a request's condition keys),
:mod:`.policy` (IAM evaluation), :mod:`.lambdas` (function processes and the Runtime
API), :mod:`.front_door` (HTTP APIs as payload 2.0 events), :mod:`.deploy` (resources,
event sources, custom resources), :mod:`.checks` (end to end), :mod:`.main` (the run).
"""
