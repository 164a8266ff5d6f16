"""Drives codeshot with the official Agent Protocol client (agent-protocol-client 1.1.0),
run in its own virtualenv (its pins clash with the platform's: tests/conftest.py). Prints
what the client got, as JSON, for the test to check.

    python ap_client.py URL KEY steps TASK_JSON STEP_INPUT...  (an empty input: none)
    python ap_client.py URL KEY artifacts TASK_ID FILE
"""

import asyncio
import json
import sys

from agent_protocol_client import (
    AgentApi,
    ApiClient,
    ApiException,
    Configuration,
    StepRequestBody,
    TaskRequestBody,
)


async def steps(api, task_json, *inputs):
    task = await api.create_agent_task(TaskRequestBody(**json.loads(task_json)))
    done = []
    for text in inputs:
        body = StepRequestBody(input=text) if text else None
        step = await api.execute_agent_task_step(task.task_id, step_request_body=body)
        done.append(step.to_dict())
    listed = await api.list_agent_task_steps(task.task_id, current_page=1, page_size=10)
    tasks = await api.list_agent_tasks(current_page=1, page_size=1)
    got = await api.get_agent_task(task.task_id)
    return {"task": task.to_dict(), "steps": done, "got": got.to_dict(),
            "listed": [s.to_dict() for s in listed.steps],
            "listed_pagination": listed.pagination.to_dict(),
            "tasks": [t.task_id for t in tasks.tasks], "tasks_pagination":
            tasks.pagination.to_dict()}


async def artifacts(api, task_id, path):
    uploaded = await api.upload_agent_task_artifacts(task_id, file=path, relative_path="in/")
    listed = await api.list_agent_task_artifacts(task_id, current_page=1, page_size=10)
    data = await api.download_agent_task_artifact(task_id, uploaded.artifact_id)
    try:
        await api.download_agent_task_artifact(task_id, "nothing.txt")
        missing = None
    except ApiException as exc:
        missing = {"status": exc.status, "body": json.loads(exc.body)}
    return {"uploaded": uploaded.to_dict(), "listed": [a.to_dict() for a in listed.artifacts],
            "pagination": listed.pagination.to_dict(), "downloaded": bytes(data).decode(),
            "missing": missing}


async def main(url, key, command, *args):
    async with ApiClient(Configuration(host=url)) as client:
        client.set_default_header("Authorization", f"Bearer {key}")
        api = AgentApi(client)
        return await {"steps": steps, "artifacts": artifacts}[command](api, *args)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(*sys.argv[1:]))))
