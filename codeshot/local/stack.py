"""The local stack: moto's server (a child process) plus the platform (the API, the
session runner and the example agents, in this process), all on loopback.

``codeshot local up`` builds one of these, prints where everything is, writes
``.codeshot/local.json`` once ready and removes it on shutdown. A directory has one
running stack: a second refuses to start while the file's stack is alive.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from codeshot.client import STATE_FILE, read_state, stack_process_gone
from codeshot.errors import InvalidInput, StackRunning
from codeshot.local.aws_server import LocalAWS, check_port_free
from codeshot.settings import Settings

if TYPE_CHECKING:
    from codeshot.local.http_server import HttpServer
    from codeshot.local.poller import QueuePoller
    from codeshot.models import User
    from codeshot.services import Services

LOCAL_USER = "local"
# The repository's agent_template/, shipped in the package (codeshot/agent_template links
# to it in the repository): `codeshot new` copies it, the local stack runs it as notes.
TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "agent_template"


def example_agent_dirs() -> list[Path]:
    """The agents the local stack runs, all shipped in the package: the copy-and-edit
    template (notes) and the examples (a dice roller, a standalone clock)."""
    examples = Path(__file__).resolve().parent / "examples"
    dirs = [TEMPLATE_DIR, *sorted(p for p in examples.iterdir() if p.is_dir())]
    return [d for d in dirs if (d / "agent.yaml").is_file()]


class LocalStack:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8080,
        aws_port: int | None = None,
        directory: Path | None = None,
        base: Settings | None = None,
        progress: Callable[[str], None] = print,
        examples: bool = True,
    ) -> None:
        self.host, self.port = host, port
        # moto's server has no authentication and holds the platform's signing keys: it
        # stays on loopback whatever address the API listens on.
        self.aws = LocalAWS("127.0.0.1",
                            port + 1 if aws_port is None and port else aws_port or 0)
        self.state_path = (directory or Path.cwd()) / STATE_FILE
        self.base = base or Settings()
        self.progress = progress
        self.settings: Settings | None = None
        self.state: dict[str, Any] = {}
        self.examples = examples
        self._services: Services | None = None
        self.api: HttpServer | None = None
        self.pollers: list[QueuePoller] = []
        self.agents: list[HttpServer] = []

    @property
    def services(self) -> Services:
        """The platform's services (once :meth:`start` has provisioned the stack)."""
        if self._services is None:
            raise RuntimeError("the local stack is not started")
        return self._services

    @property
    def api_url(self) -> str:
        # Listening on every address (0.0.0.0, ::), the platform calls itself on loopback.
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host  # noqa: S104
        return f"http://{f'[{host}]' if ':' in host else host}:{self.port}"

    def start(self) -> dict[str, Any]:
        began = time.perf_counter()
        if self.state_path.parent.exists() and not self.state_path.parent.is_dir():
            raise InvalidInput(f"{self.state_path.parent} is a file: local up keeps its "
                               f"{STATE_FILE.name} in that directory; move the file away")
        self._refuse_if_running()
        check_port_free(self.host, self.port, "--port")
        self.progress("Starting local AWS (moto server) ...")
        endpoint = self.aws.start()
        try:
            self.settings = self._provision(endpoint)
        except BaseException:
            self.aws.stop()
            raise
        try:
            api_key = self._start_platform()
        except BaseException:
            self.stop()
            raise
        self.state = {
            "api_url": self.api_url,
            "graphql_url": f"{self.api_url}/graphql",
            "aws_endpoint_url": endpoint,
            "queue_url": self.settings.queue_url,
            "erasure_queue_url": self.settings.erasure_queue_url,  # `users delete`
            "user_pool_id": self.settings.user_pool_id,
            "user_pool_client_id": self.settings.user_pool_client_id,
            "api_key": api_key,
            "pid": os.getpid(),
        }
        self._write_state()
        self.progress(f"API: {self.api_url}")
        self.progress(f"AWS endpoint: {endpoint}")
        self.progress(f"API key: {api_key}")
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            # Local mode lets agents and Funcs call loopback URLs, moto's included, and
            # moto's Cognito takes any confirmation code.
            self.progress(f"Listening on {self.host}: anyone who reaches the API can sign "
                          "up (any confirmation code works here) and make the platform read "
                          "loopback URLs, moto's server too, which holds every secret and "
                          "record of this stack (and answers any process on this machine). "
                          "Share it only with people you would give all of it.")
        self.progress(f"Ready in {time.perf_counter() - began:.2f}s (Ctrl-C to stop; "
                      "everything is in memory: users, agents and sessions go with it)")
        return self.state

    def _provision(self, endpoint: str) -> Settings:
        from codeshot.store.provision import create_all, create_user_pool

        self.progress("Creating tables, embeds bucket, session queue and user pool ...")
        settings = self.base.replace(
            aws_endpoint_url=endpoint, api_url=self.api_url, local_mode=True
        )
        return create_user_pool(create_all(settings))

    def _start_platform(self) -> str:
        """The API on loopback and a first user; returns that user's API key."""
        from codeshot.api.app import create_app
        from codeshot.local.http_server import HttpServer
        from codeshot.services import Services
        from codeshot.usecases.users import create_user

        assert self.settings is not None
        self._services = Services(self.settings)
        self.progress("Creating signing keys and the first user ...")
        user, api_key = create_user(self.services, LOCAL_USER)
        self.progress("Starting the API ...")
        self.api = HttpServer(create_app(services=self.services), self.host, self.port)
        self.api.start()
        self._start_runner()
        if self.examples:
            self._start_agents(user)
        return api_key

    def _start_runner(self) -> None:
        from codeshot.local.poller import QueuePoller
        from codeshot.runner.session_runner import SessionRunner
        from codeshot.store.queue import ErasureWork, PromptWork
        from codeshot.usecases.erasure import erase_part
        from codeshot.usecases.prompts import Prompts

        self.progress("Starting the session runner ...")
        runner, prompts = SessionRunner(self.services), Prompts(self.services)
        self.pollers = [
            QueuePoller(self.services.queue, runner.handle, give_up=runner.give_up),
            # Agent Protocol callbacks: each poll waits out its delay in the queue.
            QueuePoller(self.services.prompt_queue, prompts.handle, parse=PromptWork.parse,
                        name="prompt-poller", give_up=prompts.give_up),
            # Deleted users' erasure (the eraser function in AWS).
            QueuePoller(self.services.erasure_queue,
                        lambda work, _final: erase_part(self.services, work),
                        parse=ErasureWork.parse, name="erasure-poller", workers=1)]
        for poller in self.pollers:
            poller.start()

    def _start_agents(self, user: User) -> None:
        """Serve the example agents on loopback and register them, owned by the first user."""
        from codeshot.local.http_server import HttpServer
        from codeshot.sdk.project import load_agent, read_config
        from codeshot.usecases.registration import AgentFields, AgentRegistration
        from codeshot.usecases.users import principal_of

        assert self.settings is not None
        owner = principal_of(user)
        registration = AgentRegistration(self.services, charge=None)
        for directory in example_agent_dirs():
            config = read_config(directory)
            agent_id = f"{user.username}/{config.handle}"
            self.progress(f"Starting agent {agent_id} ...")
            app = load_agent(directory, config).app(
                self.settings.replace(agent_id=agent_id))
            server = HttpServer(app, "127.0.0.1", 0)  # only the platform calls them
            url = server.start()
            self.agents.append(server)
            fields = AgentFields(
                name=config.name, description=config.description, query_url=url, func_url=url,
                published=True, sample_queries=config.sample_queries)
            registration.create(owner, config.handle, fields)

    def _refuse_if_running(self) -> None:
        """Taking over a live stack's local.json would point every command here at this
        stack, and stopping this one would delete it; a crashed stack's file is taken."""
        state = read_state(self.state_path.parents[1]) or {}
        if state and _alive(state):
            raise StackRunning(
                f"a local stack is already running from this directory at "
                f"{state.get('api_url')} (pid {state.get('pid', '?')}, {STATE_FILE}): use "
                f"it, stop it first, or run `codeshot local up --port N` in another "
                f"directory (its ports are taken)")

    def _write_state(self) -> None:
        """Write local.json whole (a reader never sees half of it). It holds an API key: a
        new file of a name nobody can plant first, made 0600 (mkstemp: O_EXCL, no
        symlink followed), never readable by others for a moment."""
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix="local.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as file:
                file.write(json.dumps(self.state, indent=2) + "\n")
            os.replace(tmp, self.state_path)
        except BaseException:
            os.unlink(tmp)
            raise

    def stop(self) -> None:
        if self.state and read_state(self.state_path.parents[1]) == self.state:
            self.state_path.unlink(missing_ok=True)  # ours: never another stack's
        for poller in self.pollers:
            poller.stop()
        self.pollers = []
        from codeshot.local.http_server import stop_all

        stop_all([*self.agents, *([self.api] if self.api is not None else [])])
        self.agents, self.api = [], None
        self.aws.stop()


def _alive(state: dict[str, Any]) -> bool:
    """Whether local.json's stack still runs: its process exists (a reused pid is caught
    next) and its API port takes connections."""
    from urllib.parse import urlsplit

    if stack_process_gone(state):
        return False
    url = urlsplit(str(state.get("api_url", "")))
    try:
        with socket.create_connection((url.hostname or "", url.port or 80), timeout=1):
            return True
    except (OSError, ValueError):
        return False
