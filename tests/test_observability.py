"""Powertools around a Lambda handler: the ``codeshot`` loggers write JSON lines with the
service, the Lambda context and the correlation id of the work being handled. Run in a
child process: the logging set-up is process-wide, as it is in a Lambda."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# A Lambda context as the runtime gives it (the name is the function's in both tests).
CONTEXT = """
from dataclasses import dataclass

@dataclass
class Context:
    function_name: str = "codeshot-fn"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:fn"
    aws_request_id: str = "req-1"
"""
SCRIPT = CONTEXT + """
import logging, sys
from codeshot.observability import correlated, lambda_handler

@lambda_handler("codeshot-runner")
def handler(event, context):
    with correlated(event["correlation_id"]):
        logging.getLogger("codeshot.runner").warning("answering %s", event["message"])
    logging.getLogger("codeshot.runner").warning("between queries")
    return "ok"

print("loaded before the first invocation:", "aws_lambda_powertools" in sys.modules,
      file=sys.stderr)
print(handler({"correlation_id": "trace-7", "message": "m1"}, Context()), file=sys.stderr)
"""


def test_handler_logs_are_json_with_the_lambda_context_and_correlation_id():
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         check=True, cwd=root, timeout=60,
                         env={"PYTHONPATH": str(root), "PATH": "", "AWS_DEFAULT_REGION":
                              "us-east-1", "AWS_LAMBDA_FUNCTION_NAME": "codeshot-fn",
                              "POWERTOOLS_TRACE_DISABLED": "true"})
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    answering, between = lines
    assert answering["message"] == "answering m1"
    assert answering["correlation_id"] == "trace-7"
    assert answering["service"] == "codeshot-runner"
    assert answering["function_name"] == "codeshot-fn"
    assert answering["function_request_id"] == "req-1"
    assert "correlation_id" not in between  # the id is the query's, not the process's
    assert "loaded before the first invocation: False\nok" in run.stderr  # a lazy import


TRACED = CONTEXT + """
import json, os, socket
daemon = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
daemon.bind(("127.0.0.1", 0))
os.environ.update({"AWS_XRAY_DAEMON_ADDRESS": f"127.0.0.1:{daemon.getsockname()[1]}",
                   "_X_AMZN_TRACE_ID": "Root=1-5759e988-bd862e3fe1be46a994272793;"
                                       "Parent=53995c3f42cd8ad8;Sampled=1"})
from codeshot.observability import lambda_handler

@lambda_handler("codeshot-api")
def handler(event, context):  # what Mangum returns for a createApiKey
    return {"statusCode": 200, "cookies": ["codeshot_session=COOKIE-SECRET; HttpOnly"],
            "body": json.dumps({"data": {"createApiKey": {"key": "KEY-SECRET"}}})}

handler({"rawPath": "/graphql"}, Context())
daemon.settimeout(5)
print(daemon.recvfrom(65535)[0].decode())
"""


def test_a_traced_response_keeps_its_secrets_out_of_x_ray():
    """Powertools records a handler's response in its trace segment by default: every
    sampled API key made, session cookie and reply, readable by anyone reading traces."""
    root = Path(__file__).resolve().parents[1]
    run = subprocess.run([sys.executable, "-c", TRACED], capture_output=True, text=True,
                         check=True, cwd=root, timeout=60,
                         env={"PYTHONPATH": str(root), "PATH": "", "AWS_REGION": "us-east-1",
                              "AWS_LAMBDA_FUNCTION_NAME": "codeshot-fn",
                              "LAMBDA_TASK_ROOT": str(root)})
    segment = json.loads(run.stdout.split("\n", 1)[1])  # after the daemon's header
    assert segment["name"] == "## call", segment  # the handler's subsegment: traced
    assert "SECRET" not in run.stdout, run.stdout
