"""The ``codeshot`` command."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from codeshot.errors import CodeshotError, install_hint

if TYPE_CHECKING:
    from codeshot.client import GivenBack, PlatformClient, Serving
    from codeshot.lending import Lent
    from codeshot.models import User
    from codeshot.settings import Settings

# Third-party packages of the `platform` and `local` extras (not installed with the SDK).
PLATFORM_PACKAGES = frozenset({"boto3", "botocore", "strawberry", "numpy", "moto"})
# AWS error codes of a resource that is not there (a table, the queue, a bucket, a secret).
MISSING_RESOURCE = frozenset({"ResourceNotFoundException", "NoSuchBucket",
                              "AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"})
# AWS error codes of credentials that AWS does not accept.
BAD_CREDENTIALS = frozenset({"UnrecognizedClientException", "InvalidClientTokenId",
                             "ExpiredToken", "ExpiredTokenException", "InvalidAccessKeyId",
                             "SignatureDoesNotMatch"})
NOT_ALLOWED = frozenset({"AccessDenied", "AccessDeniedException"})  # known, not permitted
MAX_PORT = 65535
API_KEY_HELP = "your API key (other users of this machine see it in `ps`: prefer " \
    "CODESHOT_API_KEY)"
# Where a user's commands find the platform and their key (codeshot.client.Target.find).
TARGETS = ("of the running `codeshot local up` of this directory, with its own key "
           "(.codeshot/local.json), else of CODESHOT_API_URL with CODESHOT_API_KEY when set, "
           "else of the nearest such stack above (one left by a crashed stack is passed over)")


def _check_ports(port: int, aws_port: int | None) -> None:
    """`local up`'s ports, refused before anything starts (INVALID_INPUT)."""
    from codeshot.errors import InvalidInput

    if not 1 <= port <= MAX_PORT:
        raise InvalidInput(f"--port {port} is not a port: give 1-{MAX_PORT}")
    if aws_port is None and port == MAX_PORT:
        raise InvalidInput(f"--port {port} leaves no port for moto's server (--port + 1): "
                           f"give --aws-port")
    if aws_port is not None and not 0 <= aws_port <= MAX_PORT:
        raise InvalidInput(f"--aws-port {aws_port} is not a port: give 1-{MAX_PORT} (0: any)")
    if aws_port == port:
        raise InvalidInput(f"--port and --aws-port are both {port}: give two ports")


class _Stop(BaseException):
    """Raised by local up's signal handler in the main thread, to unwind wherever it
    is (a BaseException: no `except Exception` on the way swallows it)."""


def _local_up(args: argparse.Namespace) -> int:
    import threading

    _check_ports(args.port, args.aws_port)
    stopping: list[str] = []
    stop_requested = threading.Event()

    def progress(line: str) -> None:
        # A _Stop raised while a finalizer runs is lost ("Exception ignored in ..."):
        # each step's line and the wait below pick the request up again.
        if stop_requested.is_set():
            raise _Stop
        print(line, flush=True)

    def shutdown(signum: int, _frame: object) -> None:
        # Stop from the main thread, not here: stopping moto while start() still talks to
        # it made tracebacks and a false "cannot reach AWS". A second signal waits.
        if not stopping:
            stopping.append(signal.Signals(signum).name)
            stop_requested.set()
            raise _Stop

    # Before the stack's imports (half a second on a busy machine): Ctrl-C then is clean.
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # SIGHUP: the terminal closed
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), shutdown)
    stack = None
    try:
        try:
            from codeshot.local.stack import LocalStack

            stack = LocalStack(host=args.host, port=args.port, aws_port=args.aws_port,
                               progress=progress)
            stack.start()
            stop_requested.wait()
        except _Stop:
            pass
        print(f"Stopping ({stopping[0]}) ...", flush=True)
    finally:
        if stack is not None:
            stack.stop()
    print("Stopped.", flush=True)
    return 0


def _target_settings(**overrides: object) -> Settings:
    """The stack to act on: the running `codeshot local up` in this directory (or above,
    while CODESHOT_API_URL is not set: :func:`codeshot.client.local_stack`), or the
    environment's settings (a deployed platform), with ``overrides``."""
    from codeshot.client import read_state
    from codeshot.settings import Settings, get_settings

    settings = Settings(**overrides) if overrides else get_settings()
    state = read_state()
    if state:
        settings = settings.replace(
            aws_endpoint_url=state["aws_endpoint_url"], api_url=state["api_url"],
            queue_url=state.get("queue_url"), user_pool_id=state.get("user_pool_id"),
            erasure_queue_url=state.get("erasure_queue_url"),
            user_pool_client_id=state.get("user_pool_client_id"),
        )
    return settings


def _users_keys(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.users import find_user

    for key_id in sorted(find_user(Services(_target_settings()), args.name).api_key_ids):
        print(key_id)
    return 0


def _users_revoke_key(args: argparse.Namespace) -> int:
    from codeshot.errors import LastApiKey
    from codeshot.services import Services
    from codeshot.usecases.users import revoke_key_of

    try:
        revoked = revoke_key_of(Services(_target_settings()), args.name, args.key)
    except LastApiKey as exc:
        raise LastApiKey(f"{exc.message} (`codeshot users new-key {args.name}`)") from exc
    print(f"Revoked {revoked.key_id} of {args.name}")
    return 0


def _users_new_key(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.users import create_api_key, find_user, principal_of

    services = Services(_target_settings())
    record, api_key = create_api_key(services, principal_of(find_user(services, args.name)))
    print(api_key)
    print(f"New API key {record.key_id} of {args.name} (shown once)", file=sys.stderr)
    return 0


def _users_create(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.users import create_user

    _, api_key = create_user(Services(_target_settings()), args.name)
    print(api_key)
    return 0


def _users_limits(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.users import set_limits

    services = Services(_target_settings())
    user = set_limits(services, args.name, args.daily_queries, args.daily_tokens)
    queries = services.daily_limit(user.daily_query_limit)
    tokens = services.settings.daily_token_limit if user.daily_token_limit is None \
        else user.daily_token_limit
    print(f"{user.username}: {queries} queries and {tokens} LLM tokens per day")
    return 0


def _users_list(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.accounts import list_users

    services = Services(_target_settings())
    after = None
    while True:
        page = list_users(services, after)
        for user in page.users:
            if args.erasing and (user.deleted is None or user.erased is not None):
                continue
            flags = [_deleted(services.settings, user)] if user.deleted else \
                [f for f in ("operator", "disabled") if getattr(user, f)]
            limit = services.daily_limit(user.daily_query_limit)
            print(f"{user.username}\t{user.email or '-'}\t{limit} queries/day\t"
                  f"{','.join(flags) or 'active'}")
        if page.after is None:
            return 0
        after = page.after


def _deleted(settings: Settings, user: User) -> str:
    """A deleted user's state in a listing: how far their erasure is, and when its last
    part ran (a part not run for long, with an empty dead-letter queue, is stuck)."""
    from codeshot.usecases.erasure_start import window_seconds

    assert user.deleted is not None
    if user.erased is not None and user.embeds_kept:
        return (f"deleted (erased {_when(user.erased)}, but for their embeds' files: kept "
                "for good, the sessions table not marked by `codeshot users hold-replies`)")
    if user.erased is not None and user.embeds_crowded:
        return (f"deleted (erased {_when(user.erased)}, but for some of their embeds' files: "
                "kept, shared with more deleted users than an erasure looks past; see the "
                "eraser's log)")
    if user.erased is not None:
        return f"deleted (erased {_when(user.erased)})"
    if user.erasure_ran is None:
        due = user.deleted + timedelta(seconds=window_seconds(settings))
        return f"deleted (erasure not started; due {_when(due)})"
    return f"deleted (erasing: {user.erasure_part} parts done, the last {_when(user.erasure_ran)})"


def _when(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _users_disable(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.accounts import set_disabled

    user = set_disabled(Services(_target_settings()), args.name, args.disable)
    print(f"{user.username} is {'disabled' if user.disabled else 'enabled'}")
    return 0


def _deploy_owner() -> str:
    """The owner of the kit's deployed agents: codeshot:adminUsername in this directory's
    cdk.json, else its default."""
    from codeshot.usecases.accounts import DEFAULT_DEPLOY_OWNER

    try:
        context = json.loads(Path("cdk.json").read_text(encoding="utf-8"))["context"]
        return str(context.get("codeshot:adminUsername", DEFAULT_DEPLOY_OWNER))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return DEFAULT_DEPLOY_OWNER


def _users_delete(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.accounts import delete_user
    from codeshot.usecases.erasure_start import window_seconds

    services = Services(_target_settings())
    user = delete_user(services, args.name, None if args.force else _deploy_owner())
    print(f"{user.username} is deleted: their data is erased from "
          f"{window_seconds(services.settings)} s from now")
    return 0


def _users_hold_replies(args: argparse.Namespace) -> int:
    from codeshot.services import Services

    services = Services(_target_settings())
    start, held = None, 0
    while True:
        written, start = services.sessions.hold_replies(start)
        held += written
        if start is None:
            print(f"{held} reply embeds held: erasures now delete objects no other user's "
                  "session holds")
            return 0


def _users_operator(args: argparse.Namespace) -> int:
    from codeshot.services import Services
    from codeshot.usecases.accounts import set_operator

    user = set_operator(Services(_target_settings()), args.name, not args.off)
    print(f"{user.username} is {'an operator' if user.operator else 'not an operator'}")
    return 0


def _users_confirm(args: argparse.Namespace) -> int:
    from codeshot.services import Services

    Services(_target_settings()).accounts.admin_confirm(args.email)
    print(f"{args.email} is confirmed: it can sign in")
    return 0


def _keys_rotate(args: argparse.Namespace) -> int:
    from codeshot.auth.keys import REFRESH_SECONDS, SIGNING_DELAY_SECONDS
    from codeshot.services import Services

    keyring = Services(_target_settings()).keyring
    new = keyring.rotate()
    kids = [jwk["kid"] for jwk in keyring.jwks()["keys"]]
    print(f"New signing key {new.kid}: published now (every API instance serves it within "
          f"{REFRESH_SECONDS // 60} minutes), it signs from "
          f"{new.signs_from():%Y-%m-%d %H:%M:%S} UTC (in {SIGNING_DELAY_SECONDS // 60} "
          f"minutes, once every cached JWKS lists it); until then "
          f"{keyring.signing_key().kid} signs. All keys: {', '.join(kids)}")
    return 0


def _router_tune(args: argparse.Namespace) -> int:
    import time

    from codeshot.routing.embedders import MiniLMEmbedder
    from codeshot.routing.index import embed_again
    from codeshot.routing.tune import tune
    from codeshot.services import Services

    # The embedder is not used here: CODESHOT_MINILM_MODEL may name the model to be made.
    registry = Services(_target_settings(embedder="static")).registry
    agents = registry.scan_all()
    started = time.monotonic()
    tuning = tune(agents, args.out, epochs=args.epochs)
    # Asked for only: the agents' stored vectors are their platform's router's, and one
    # routing with another model (not yet this tuning, or never) would embed each agent
    # again, in each of its processes.
    stored = (f", and stored its vectors for "
              f"{embed_again(agents, MiniLMEmbedder(str(args.out)), registry)} of them"
              if args.store_vectors else "")
    print(f"Tuned {tuning.model_id} on {tuning.agents} agents ({tuning.pair_steps} pair steps "
          f"in {tuning.epochs} epochs) in "
          f"{time.monotonic() - started:.0f} s, saved to {args.out}{stored}. Route with it: "
          f"CODESHOT_EMBEDDER=minilm CODESHOT_MINILM_MODEL={args.out.resolve()}")
    return 0


def _router_check(args: argparse.Namespace) -> int:
    from codeshot.routing.tune import check_files, read_tuning

    directory = args.dir.resolve()
    tuning = read_tuning(directory)
    check_files(directory, tuning, full=True)
    print(f"{directory}: {tuning.model_id}, tuned on {tuning.agents} agents; its tuning file, "
          f"graph and vocabulary are as `codeshot router tune` wrote them")
    return 0


class _Stops:
    """SIGINT, SIGTERM and SIGHUP, taken from creation on (the terminal closed, the ssh
    session dropped: their default ended the process without giving a lent revision
    back, when one came before the wait). A second signal ends the process at once; if
    ``during`` is set (a lent agent to give back) it only prints that, and a third does:
    a restore cut short is half done."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.during: str | None = None
        for name in ("SIGINT", "SIGTERM", "SIGHUP"):
            if hasattr(signal, name):  # Windows has no SIGHUP
                signal.signal(getattr(signal, name), self.handler)

    def handler(self, signum: int, _frame: object) -> None:
        # Runs in the main thread between two of its bytecodes: no lock (an Event's set()
        # could wait on the one its wait() holds) and no print (it may be mid-print).
        if not self.received:
            self.received.append(signal.Signals(signum).name)
        elif self.during:
            os.write(sys.stdout.fileno(), f"{self.during}\n".encode())
            self.during = None
        else:
            raise SystemExit(128 + signum)

    def wait(self) -> str:
        """Blocks until a signal came (at once if one did already) and names it."""
        while not self.received:
            time.sleep(0.1)
        return self.received[0]


def _serve(args: argparse.Namespace) -> int:
    from codeshot.client import PlatformClient, Target, agent_fields
    from codeshot.local.http_server import HttpServer
    from codeshot.sdk.project import load_agent, read_config
    from codeshot.settings import get_settings

    if not 0 <= args.port <= MAX_PORT:
        from codeshot.errors import InvalidInput

        raise InvalidInput(f"--port {args.port} is not a port: give 1-{MAX_PORT} (0: any)")
    stops = _Stops()  # before registering: a stop then still gives back
    config = read_config(args.agent_dir)
    target = Target.find()
    settings = get_settings().replace(api_url=target.api_url)
    client = PlatformClient(target, target.lending_records()) if args.register else None
    agent_id = f"{client.username()}/{config.handle}" if client is not None else None
    if agent_id is not None:  # it will be this user's agent: accept tokens for it only
        settings = settings.replace(agent_id=agent_id)
    elif not settings.agent_id and target.api_key:  # beside a local stack: its user's agent
        settings = settings.replace(
            agent_id=f"{PlatformClient(target).username()}/{config.handle}")
    app = load_agent(args.agent_dir, config).app(settings)
    server = HttpServer(app, "127.0.0.1", args.port)
    url = server.start()
    lent = None
    try:
        print(f"Serving {config.handle} at {url} for the platform at {target}", flush=True)
        if client is not None and agent_id is not None:
            _finish_restores(client, agent_id, url)
            serving = client.serve_here(agent_fields(config, url))
            lent = serving.lent
            if lent is not None:
                stops.during = (f"Restoring {lent.agent_id} ... (Ctrl-C again leaves it lent "
                                f"at {url})")
            print(_serving_said(serving, url), flush=True)
        print(f"Stopping ({stops.wait()}) ...", flush=True)
        if client is not None and lent is not None:
            said = _given_back(lent, client.give_back(lent))
            stops.during = None  # given back: a signal now only cuts the server's stop short
            if said:
                print(said, flush=True)
    finally:
        server.stop()
    return 0


def _serving_said(serving: Serving, url: str) -> str:
    """What `serve --register` did, as it tells the user."""
    lent = serving.lent
    if lent is not None and lent.previous_url != url:
        now = " (it does not answer now)" if serving.unanswered else ""
        return (f"Updated {serving.agent_id}: served here until Ctrl-C, then again at "
                f"{lent.previous_url}{now} with its own name, description and sample "
                "queries")
    # New, registered here before, or at a serve's revision whose server stopped: it
    # stays at this URL.
    unanswered = (f"; its previous server {serving.unanswered} does not answer"
                  if serving.unanswered else "")
    return (f"{'Updated' if lent or serving.unanswered else 'Registered'} {serving.agent_id} "
            f"at {url} (agent.yaml and its handshake read{unanswered}): it stays registered "
            "there after Ctrl-C, answering only while served")


def _given_back(lent: Lent, given: GivenBack) -> str | None:
    """What give_back did with the agent lent to ``lent.url``, as serve tells the user
    (nothing when it stays where it was registered, with agent.yaml's fields)."""
    url = lent.url
    if given.deleted:
        return (f"{lent.agent_id}'s revision at {url} was deleted meanwhile (another serve "
                "took it home past it, or its owner): nothing to give back")
    if given.agent_gone:
        return f"{lent.agent_id} was deleted meanwhile (or renamed): nothing to give back"
    if given.taken_over:
        return (f"{lent.agent_id}'s revision at {url} was taken over meanwhile by a serve at "
                f"{given.moved_to}: left to it")
    if given.lent_on:
        return (f"{lent.agent_id} was lent on to {given.moved_to} meanwhile by another serve: "
                f"it goes back to {lent.home_url} when that one stops; its revision at {url} "
                "deleted")
    if given.moved_to is not None:
        return (f"{lent.agent_id} was switched to {given.moved_to} meanwhile (another serve, "
                f"or its owner): left there, its revision at {url} kept")
    if given.gone:
        return (f"{lent.agent_id} stays at {url} (stopped now): its previous revision at "
                f"{given.back_to} was deleted meanwhile")
    if not given.restored:
        return (f"{lent.agent_id} stays at {url} (stopped now): its previous server "
                f"{given.back_to} does not answer; {_serve_again(given.back_to)}")
    if given.back_to == url:
        return None
    if given.changed:
        return (f"Restored {lent.agent_id} at {given.back_to}; changed meanwhile, not "
                f"restored: {', '.join(given.changed)}")
    return (f"Restored {lent.agent_id} at {given.back_to}, with its own name, "
            "description and sample queries")


def _finish_restores(client: PlatformClient, agent_id: str, here: str | None = None
                     ) -> list[tuple[Lent, GivenBack | None]]:
    """Give back what serves killed before their restore left lent (their records here),
    saying so; what there was (those still served too)."""
    done = client.finish_restores(agent_id, here)
    for unreadable in client.records.unreadable if client.records is not None else []:
        print(f"codeshot: a lending record that cannot be read is left as it is: {unreadable}",
              file=sys.stderr, flush=True)
    for lent, given in done:
        if given is None:
            print(f"{agent_id} is lent to {lent.url} by a serve still running: it gives it "
                  "back when it stops", flush=True)
            continue
        print(f"{agent_id} was left lent to {lent.url} by a serve that ended without giving "
              "it back: giving it back now", flush=True)
        if given.left_lent:
            print(f"{agent_id} stays lent to {lent.url}: its previous server {given.back_to} "
                  "does not answer (its record is kept)", flush=True)
            continue
        said = _given_back(lent, given)
        if said:
            print(said, flush=True)
    return done


def _serve_again(url: str | None) -> str:
    """How the user brings an agent back to its server at ``url``."""
    from codeshot.client import loopback_port

    port = loopback_port(url)
    if port:
        return f"serve it again with `codeshot serve DIR --register --port {port}`"
    return f"start that server again, then `codeshot agent register DIR --url {url}`"


def _agent_register(args: argparse.Namespace) -> int:
    from codeshot.client import PlatformClient, Target, agent_fields
    from codeshot.errors import InvalidInput
    from codeshot.sdk.project import read_config

    config = read_config(args.agent_dir)
    url = args.url or config.deployment_url
    if not url:
        raise InvalidInput(f"where is {config.handle} served? Give --url URL (or "
                           f"deployment_url in agent.yaml), or serve and register it with "
                           f"`codeshot serve {args.agent_dir} --register`")
    target = Target.find()
    agent_id, updated = PlatformClient(target).register(agent_fields(config, url))
    print(f"{'Updated' if updated else 'Registered'} {agent_id} at {url} with the platform "
          f"at {target}")
    return 0


def _agent_restore(args: argparse.Namespace) -> int:
    from codeshot.client import PlatformClient, Target
    from codeshot.errors import AgentUnavailable

    target = Target.find()
    records = target.lending_records()
    client = PlatformClient(target, records)
    agent_id = f"{client.username()}/{args.handle}"
    done = _finish_restores(client, agent_id)
    if not done:
        print(f"Nothing to restore: no serve left {agent_id} lent ({records.directory} "
              f"names none for the platform at {target})")
    homes = [str(given.back_to) for _, given in done if given is not None and given.left_lent]
    if homes:
        raise AgentUnavailable(f"{agent_id} is still lent: start its server at "
                               f"{', '.join(homes)}, then run `codeshot agent restore "
                               f"{args.handle}` again")
    return 0


def _new(args: argparse.Namespace) -> int:
    import shlex

    from codeshot.devtools.agents import new_agent

    handle = new_agent(args.agent_dir)
    where = shlex.quote(str(args.agent_dir))
    print(f"Created agent {handle!r} in {args.agent_dir}. It is still the notes template:\n"
          f"  1. edit {args.agent_dir / 'agent.py'}: the base prompt, few-shots and Funcs\n"
          f"  2. edit {args.agent_dir / 'agent.yaml'}: its description, sample queries and "
          "tests are the template's\n"
          f"  3. codeshot agent test {where}\n"
          f"  4. codeshot serve {where} --register   (beside `codeshot local up`)")
    return 0


def _agent_test(args: argparse.Namespace) -> int:
    from codeshot.devtools.agents import Verdict, format_results, run_agent_tests

    results = run_agent_tests(args.agent_dir)
    print(format_results(results))
    if all(result.verdict is Verdict.SKIP for result in results):
        # Nothing was checked: a run in CI must not read as the agent passing.
        print("codeshot: no test ran: each was skipped (see the reason above)", file=sys.stderr)
        return 1
    return 0 if all(result.passed for result in results) else 1


def _oauth_list(args: argparse.Namespace) -> int:
    from codeshot.client import PlatformClient, Target

    client = PlatformClient(Target.find(args.api_url, args.api_key))
    grants = client.call("{ oauthGrants { agentId created modified } }")["oauthGrants"]
    for grant in grants:
        print(f"{grant['agentId']}\tauthorized {grant['created']}\tmodified {grant['modified']}")
    if not grants:
        print("No agent holds an OAuth token of yours.")
    return 0


def _oauth_revoke(args: argparse.Namespace) -> int:
    from codeshot.client import PlatformClient, Target

    client = PlatformClient(Target.find(args.api_url, args.api_key))
    client.call("mutation($a: String!) { revokeOAuthGrant(agentId: $a) }", {"a": args.agent_id})
    print(f"Revoked {args.agent_id}'s token: it must ask you to authorize it again")
    return 0


def _chat(args: argparse.Namespace) -> int:
    from codeshot.chat import ChatClient, run_chat
    from codeshot.client import Target

    target = Target.find(args.api_url, args.api_key)
    client = ChatClient(target.api_url + "/graphql", target.api_key, source=target.source)
    print(f"Platform: {target}", flush=True)
    try:
        return run_chat(client, args.agent, args.trace)
    except KeyboardInterrupt:  # Ctrl-C ends a chat as Ctrl-D does, with the shell's code
        print(flush=True)
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="codeshot", description="Run and manage a codeshot agent platform."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    local = commands.add_parser("local", help="the embedded local stack")
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = local_commands.add_parser(
        "up",
        help="start moto + the platform on loopback until Ctrl-C",
        description="Start the whole platform locally on moto's server. Prints the API URL, "
        "the AWS endpoint and an API key, and writes .codeshot/local.json in the current "
        "directory once ready (removed on stop). Refuses (STACK_RUNNING) while the stack of "
        "that file still runs. Its state is moto's, in memory: users, agents, API keys and "
        "sessions are gone once it stops, and a restart starts empty.",
    )
    up.add_argument("--host", default="127.0.0.1",
                    help="address the API listens on (moto's server stays on 127.0.0.1)")
    up.add_argument("--port", type=int, default=8080, help="API port (default 8080)")
    up.add_argument("--aws-port", type=int, default=None,
                    help="moto server port (default: API port + 1; 0: any)")
    up.set_defaults(run=_local_up)

    users = commands.add_parser("users", help="platform users and their API keys")
    user_commands = users.add_subparsers(dest="users_command", required=True, metavar="ACTION")
    create = user_commands.add_parser(
        "create",
        help="create a user and print their API key (shown once)",
        description="Create a user and print a new API key. Run in (or under) the directory "
        "of a running `codeshot local up`, it targets that stack (via .codeshot/local.json; "
        "one above only while CODESHOT_API_URL is not set); otherwise the platform named "
        "by the CODESHOT_* environment.",
    )
    create.add_argument("name", metavar="NAME", help="username: 1-63 of a-z, 0-9, '_' or '-'")
    create.set_defaults(run=_users_create)
    keys = user_commands.add_parser(
        "keys", help="list the ids of a user's active API keys",
        description="Print the id of each of NAME's active API keys, one a line (the keys "
        "themselves are never stored). Targets the stack as `users create` does.",
    )
    keys.add_argument("name", metavar="NAME", help="username")
    keys.set_defaults(run=_users_keys)
    revoke = user_commands.add_parser(
        "revoke-key", help="revoke one of a user's API keys",
        description="Revoke KEY, one of NAME's API keys, given by its id (key_..., from "
        "`codeshot users keys NAME`) or whole; requests with it are refused from then on. A "
        "user's last key cannot be revoked (make another first: `users new-key NAME`). Users "
        "revoke their own keys with the revokeApiKey mutation. Targets the stack as `users "
        "create` does.",
    )
    new_key = user_commands.add_parser(
        "new-key", help="make another API key for a user and print it (shown once)",
        description="Make a new API key for NAME and print it (its id goes to stderr): to "
        "replace a user's last key, which cannot be revoked before another exists. Targets "
        "the stack as `users create` does.",
    )
    new_key.add_argument("name", metavar="NAME", help="username")
    new_key.set_defaults(run=_users_new_key)
    revoke.add_argument("name", metavar="NAME", help="username")
    revoke.add_argument("key", metavar="KEY", help="the key's id (key_...) or the API key")
    revoke.set_defaults(run=_users_revoke_key)
    limits = user_commands.add_parser(
        "limits",
        help="set one user's own daily limits, or show them",
        description="Set NAME's own limits per day (UTC), overriding "
        "CODESHOT_DAILY_QUERY_LIMIT and CODESHOT_DAILY_TOKEN_LIMIT for that user; without "
        "options, print the limits that apply. Each is 0 to 2,147,483,647. Targets the "
        "stack as `users create` does.",
    )
    limits.add_argument("name", metavar="NAME", help="username")
    limits.add_argument("--daily-queries", type=int, metavar="N", help="queries per day")
    limits.add_argument("--daily-tokens", type=int, metavar="N",
                        help="LLM tokens (prompt + completion) per day, across agents")
    limits.set_defaults(run=_users_limits)
    listing = user_commands.add_parser(
        "list", help="list users: name, email, daily query limit, operator, disabled or deleted",
        description="Print every user, one a line (tab-separated). A deleted user's line "
        "says how far their erasure is: not started (and when it is due), erasing (parts "
        "done, and when the last ran: one not moving for long, with nothing in the erasure "
        "dead-letter queue, is stuck; `users delete` again goes on from it), or erased "
        "(when; and whether their embeds' files were kept, the sessions table not marked "
        "by `users hold-replies`). Targets the stack as `users create` does.")
    listing.add_argument("--erasing", action="store_true",
                         help="only deleted users whose erasure is not over")
    listing.set_defaults(run=_users_list)
    for name, disable, what in (("disable", True, "refuse all of a user's API keys and "
                                 "their sign-in at once"),
                                ("enable", False, "let a disabled user in again")):
        toggle = user_commands.add_parser(
            name, help=what,
            description=f"{what[0].upper()}{what[1:]}. Targets the stack as `users create` does.")
        toggle.add_argument("name", metavar="NAME", help="username")
        toggle.set_defaults(run=_users_disable, disable=disable)
    operator = user_commands.add_parser(
        "operator", help="make a user an operator (or, with --off, no longer one)",
        description="Operators see the console's Users page: they list users, set their "
        "daily query limits and disable them. Targets the stack as `users create` does.")
    operator.add_argument("name", metavar="NAME", help="username")
    operator.add_argument("--off", action="store_true", help="take the role away")
    operator.set_defaults(run=_users_operator)
    delete = user_commands.add_parser(
        "delete", help="delete a user and erase their data",
        description="Refuse every API key and sign-in of the user at once, delete their "
        "account in the user pool (CODESHOT_USER_POOL_ID: a user with an account is "
        "refused without it, writing nothing), and queue the "
        "erasure of their sessions (messages, embeds), agents, user storage, uploads, OAuth "
        "tokens and usage, which the eraser function starts once every credential the user "
        "held has run out (minutes). The username stays taken. Run again for a deleted "
        "user, it queues their erasure again unless it is over. Targets the stack as "
        "`users create` does.")
    delete.add_argument("name", metavar="NAME", help="username")
    delete.add_argument("--yes", action="store_true", required=True,
                        help="required: there is no undo")
    delete.add_argument("--force", action="store_true",
                        help="delete even the owner of the deployed agents "
                        "(codeshot:adminUsername in ./cdk.json, else admin): refused without")
    delete.set_defaults(run=_users_delete)
    hold = user_commands.add_parser(
        "hold-replies", help="once after upgrading: let erasures delete embeds' objects",
        description="Write the HELD# items of every reply's embeds in the sessions table "
        "(replies written before this version named their embeds' bytes in the message "
        "alone), then mark the table: until then a deleted user's erasure deletes no "
        "embed's object (another user's old reply may name the same bytes), and keeps it "
        "for good. A new stack's table is marked as CloudFormation creates the stack (only "
        "this version writes to it); one of a stack deployed before is not, even empty: "
        "run it once after upgrading, every writer upgraded; again, it "
        "writes the same items. Targets the stack as `users create` does, with "
        "CODESHOT_SESSIONS_TABLE (the stack's SessionsTable output).")
    hold.set_defaults(run=_users_hold_replies)
    confirm = user_commands.add_parser(
        "confirm", help="confirm an account's email without its code",
        description="Confirm EMAIL's sign-up (Cognito AdminConfirmSignUp), for an account "
        "whose code never arrived. Targets the stack as `users create` does.")
    confirm.add_argument("email", metavar="EMAIL", help="the account's email")
    confirm.set_defaults(run=_users_confirm)

    keys = commands.add_parser("keys", help="the platform's signing keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    rotate = key_commands.add_parser(
        "rotate",
        help="add a new signing key; the older ones keep verifying",
        description="Add a new Ed25519 signing key to the platform's secret "
        "(CODESHOT_SIGNING_SECRET_ID; needs secretsmanager:GetSecretValue, PutSecretValue and "
        "UpdateSecretVersionStage). "
        "It is in the JWKS at once and signs new tokens minutes later, once every cached JWKS "
        "lists it (the command prints when; the previous key signs until then); tokens and "
        "API keys signed by older keys stay valid while those keys are in the secret. Run "
        "beside a running `codeshot local up` to rotate its keys.",
    )
    rotate.set_defaults(run=_keys_rotate)

    router = commands.add_parser("router", help="the router that picks agents for queries")
    router_commands = router.add_subparsers(dest="router_command", required=True,
                                            metavar="ACTION")
    tune = router_commands.add_parser(
        "tune",
        help="tune the minilm router model on the registered agents",
        description="Tune all-MiniLM-L6-v2 on the registered agents' sample queries, "
        "names and descriptions (the agents of the running `codeshot local up` of this "
        "directory, or above while CODESHOT_API_URL is not set, else of the platform CODESHOT_* "
        "names), and save it to OUT. Routing "
        "with it (CODESHOT_EMBEDDER=minilm CODESHOT_MINILM_MODEL=OUT) picks the right "
        "agent first more often: 0.875 of the router benchmark's held-out queries, "
        "against 0.830 untuned. About a second an agent on two CPUs. Needs the "
        "'embeddings' extra. OUT also holds the model as an ONNX graph: routing with it "
        "needs only onnxruntime (the 'router' extra), not torch.",
    )
    tune.add_argument("--out", type=Path, required=True,
                      help="directory for the model: new, empty or an earlier tuning's "
                      "(replaced whole)")
    tune.add_argument("--epochs", type=int, default=2, choices=range(1, 11), metavar="1-10",
                      help="passes over the agents' pairs (default 2, chosen on the "
                      "benchmark's dev split)")
    tune.add_argument("--store-vectors", action="store_true",
                      help="store the tuned model's vectors for the agents it tuned on (those "
                      "unchanged since read) in place of theirs, so that a platform routing "
                      "with this tuning embeds none of them. Only for a platform that routes "
                      "(or is about to) with it: one routing with another model would embed "
                      "every agent again in each of its processes")
    tune.set_defaults(run=_router_tune)
    check = router_commands.add_parser(
        "check", help="check a tuned model's files against its tuning",
        description="Check that DIR's codeshot-tuning.json is as `codeshot router tune` wrote "
        "it and that the graph and vocabulary beside it are the ones it was tuned with (the "
        "graph by its digest: it reads the 90 MB a process starting up checks by size alone; "
        "`cdk synth` checks the same for codeshot:routerModel). Exits 2 (LLM_ERROR) naming "
        "the file that does not match.")
    check.add_argument("dir", type=Path, metavar="DIR", help="a directory `router tune` made")
    check.set_defaults(run=_router_check)

    serve = commands.add_parser(
        "serve", help="serve an agent directory over HTTP on 127.0.0.1",
        description="Serve AGENT_DIR (agent.yaml, and the code its entry_point names: "
        "agent.py or Fixie's main.py defining `agent`) on 127.0.0.1 until Ctrl-C. It trusts "
        f"the platform {TARGETS}; it accepts only tokens minted for "
        "CODESHOT_AGENT_ID (owner/handle), or when that is unset for <your username>/<handle> "
        "(.codeshot/local.json's or CODESHOT_API_KEY's user). With --register it also "
        "registers the agent as yours (<your username>/<handle>, whatever CODESHOT_AGENT_ID "
        "says) and prints its id; an agent of yours registered at another URL is served here "
        "until Ctrl-C, SIGTERM or SIGHUP (a new current revision, with agent.yaml's fields), "
        "then its previous revision is current again if its server answers (even one that "
        "did not answer at the start), with the fields you did not change meanwhile; with "
        "serves lending it on, one on top of another, the last to stop takes it back to its "
        "revision before them all. What that needs is kept in .codeshot/lent/ while it is "
        "lent (beside the local stack's .codeshot/local.json, else here; where it cannot be "
        "written, nothing is lent: INVALID_INPUT): the next `serve "
        "--register` of the agent (or `codeshot agent restore "
        "HANDLE`) first finishes a restore a killed serve left undone. A new "
        "agent, one registered at this URL, or one an earlier serve left at a loopback URL "
        "that does not answer, stays registered here, answering only while served.",
    )
    serve.add_argument("agent_dir", type=Path, metavar="AGENT_DIR")
    serve.add_argument("--port", type=int, default=8181, help="port (default 8181; 0: any)")
    serve.add_argument("--register", action="store_true",
                       help="register the agent with the platform (one registered "
                       "at another URL already: only until Ctrl-C)")
    serve.set_defaults(run=_serve)

    new = commands.add_parser(
        "new", help="copy the agent template into a new directory",
        description="Copy the agent template to AGENT_DIR; the handle is the directory name. "
                    "It prints what to edit (agent.py, agent.yaml) and run next.",
    )
    new.add_argument("agent_dir", type=Path, metavar="AGENT_DIR")
    new.set_defaults(run=_new)

    agent = commands.add_parser("agent", help="develop agents")
    agent_commands = agent.add_subparsers(dest="agent_command", required=True, metavar="ACTION")
    test = agent_commands.add_parser(
        "test", help="run agent.yaml's tests against the agent",
        description="Serve AGENT_DIR on loopback against an in-process local platform and run "
        "each test of agent.yaml through the engine (CODESHOT_LLM, fewshot by default). A "
        "test's `expected` that is a sentence about the response (\"The response should "
        "...\", as Fixie's tests are written) is judged by the language model, and SKIPPED "
        "with the offline fewshot provider; any other `expected` must appear in the answer; "
        "`regex` must match it. Prints PASS / FAIL / SKIP per test with the reason; exits 1 "
        "if any test fails, or if every test was skipped.",
    )
    test.add_argument("agent_dir", type=Path, metavar="AGENT_DIR")
    test.set_defaults(run=_agent_test)

    register = agent_commands.add_parser(
        "register", help="register (or update) an agent served at a URL",
        description="Register AGENT_DIR's agent as yours with the platform "
        f"({TARGETS}), or update it and re-read its handshake. Its handle, name, description, "
        "more_info_url and public/published come from agent.yaml (Fixie's field names). The "
        "agent must be served already: at --url (any server, an unmodified fixieai 1.0.4 "
        "agent too), else at agent.yaml's deployment_url.",
    )
    register.add_argument("agent_dir", type=Path, metavar="AGENT_DIR")
    register.add_argument("--url", help="where the agent is served")
    register.set_defaults(run=_agent_register)

    restore = agent_commands.add_parser(
        "restore", help="give back an agent a killed `serve --register` left lent",
        description="Give back your agent HANDLE where a `codeshot serve --register` run "
        "lent it and then ended without giving it back (SIGKILL, a crash, a closed laptop): "
        "as its Ctrl-C would have, by the record it kept in .codeshot/lent/ while lent "
        "(beside the local stack's .codeshot/local.json, else in the directory serve ran "
        "in). The next `serve --register` of the agent does this first too. A lending whose "
        "serve is still running is left to it; one whose previous server does not answer "
        "stays lent, its record kept for a retry (AGENT_UNAVAILABLE).")
    restore.add_argument("handle", metavar="HANDLE", help="the agent's handle (yours)")
    restore.set_defaults(run=_agent_restore)

    oauth = commands.add_parser(
        "oauth", help="your OAuth tokens held for agents",
        description="The agents holding your OAuth token for a third-party service, and "
        f"revoking one. Targets the platform {TARGETS} (--api-url first, with "
        "--api-key).")
    oauth_commands = oauth.add_subparsers(dest="oauth_command", required=True, metavar="ACTION")
    oauth_list = oauth_commands.add_parser(
        "list", help="agents holding a token of yours, one a line (never the token)")
    oauth_list.set_defaults(run=_oauth_list)
    oauth_revoke = oauth_commands.add_parser(
        "revoke", help="forget your token for AGENT_ID; it must ask you again")
    oauth_revoke.add_argument("agent_id", metavar="AGENT_ID", help="owner/handle")
    oauth_revoke.set_defaults(run=_oauth_revoke)
    for command in (oauth_list, oauth_revoke):
        command.add_argument("--api-url", help="the platform's URL")
        command.add_argument("--api-key", help=API_KEY_HELP)

    chat = commands.add_parser(
        "chat", help="a console chat session with the platform",
        description="Open a session and chat in the console, with the platform "
        f"{TARGETS} (--api-url first, with --api-key). Ctrl-D ends it.",
    )
    chat.add_argument("--agent", metavar="AGENT_ID",
                      help="talk to this agent directly (default: the planner routes)")
    chat.add_argument("--trace", action="store_true",
                      help="show every step: router, agent and Func calls")
    chat.add_argument("--api-url", help="the platform's URL")
    chat.add_argument("--api-key", help=API_KEY_HELP)
    chat.set_defaults(run=_chat)
    return parser


def _unreachable(exc: Exception) -> CodeshotError | None:
    """AWS out of reach (no credentials, no answer) as a coded error saying what to do;
    None for anything else."""
    try:
        from botocore.exceptions import ConnectionError as AwsConnectionError
        from botocore.exceptions import NoCredentialsError, PartialCredentialsError
    except ModuleNotFoundError:
        return None
    from codeshot.client import (
        STATE_FILE,
        local_stack,
        searches_above,
        stale_stack,
        state_source,
    )
    from codeshot.errors import Unauthenticated, Unavailable

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        where = " or above" if searches_above() else \
            "; with CODESHOT_API_URL (or FIXIE_API_URL) set, one above does not count"
        return Unauthenticated(
            f"no local stack here (no {STATE_FILE} in this directory{where}) and no AWS "
            f"credentials either: run this beside a running `codeshot local up`, or set "
            f"CODESHOT_* and AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY) for a deployed platform")
    if isinstance(exc, AwsConnectionError):  # refused, no such host, connect timeout
        found = local_stack()
        if found is not None:
            path, state = found
            return Unavailable(
                f"the local stack's AWS endpoint {state.get('aws_endpoint_url')} does not "
                f"answer: {stale_stack(state_source(path))}")
        return Unavailable(f"cannot reach AWS: {exc}")
    return None


def _aws_error(exc: Exception) -> CodeshotError | None:
    """An AWS failure that reached a command's top, as a coded error saying what to do (None
    for anything else). Every command that acts on the platform's resources gets these."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ModuleNotFoundError:
        return None
    from codeshot.client import read_state
    from codeshot.errors import Forbidden, NotFound, Unauthenticated, Unavailable

    if unreachable := _unreachable(exc):
        return unreachable
    state = read_state()
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", ""), error.get("Message", "")
        if code in MISSING_RESOURCE:
            fix = "run this with the CODESHOT_* names its `codeshot local up` has" \
                if state is not None else \
                "deploy the platform (infra/), or set CODESHOT_* to the names of its resources"
            where = "the local stack" if state is not None else "this AWS account and region"
            return NotFound(f"{message or code} ({exc.operation_name}): the platform's tables, "
                            f"queue, bucket or secret are not in {where}; {fix}")
        if code in BAD_CREDENTIALS:
            return Unauthenticated(f"AWS refused these credentials for "
                                   f"{exc.operation_name}: {message or code}")
        if code in NOT_ALLOWED:
            return Forbidden(f"these credentials may not {exc.operation_name}: "
                             f"{message or code}")
        return Unavailable(f"AWS refused {exc.operation_name}: {message or code} ({code})")
    if isinstance(exc, BotoCoreError):
        return Unavailable(f"the AWS call failed: {exc}")
    return None


def main(argv: list[str] | None = None) -> int:
    try:
        try:
            return _main(argv)
        finally:
            sys.stdout.flush()  # a reader that left (`| head -1`) shows here, not at exit
    except BrokenPipeError:
        # Python's "Note on SIGPIPE": stdout goes to devnull, so the flush at exit cannot
        # fail again; exit quietly, as a command whose reader left does.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.run(args)
        return code
    except CodeshotError as exc:
        # One that wraps AWS out of reach (the signing keys unread): what to do about that
        # (start the local stack, give credentials) says more.
        cause = exc.__cause__
        return _report((_unreachable(cause) if isinstance(cause, Exception) else None) or exc)
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in PLATFORM_PACKAGES:
            raise
        # `pip install codeshot-kit` is the SDK alone; the platform is an extra.
        print(f"codeshot: error: this command runs the platform, which needs "
              f"`{install_hint('local')}` ({exc.name} is missing)", file=sys.stderr)
        return 2
    except Exception as exc:
        error = _aws_error(exc)
        if error is None:
            raise
        return _report(error)


def _report(error: CodeshotError) -> int:
    """docs/errors.md's line on stderr (one per problem the message lists), exit code 2.
    An error without a message still gets its line: a bare exit 2 tells the user nothing."""
    problems = [line for line in error.message.splitlines() if line.strip()] or [
        f"{type(error).__name__} without a message (docs/errors.md says what {error.code} "
        f"means; the platform's log has this one's details)"]
    for problem in problems:
        print(f"codeshot: error: {problem} ({error.code})", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
