"""API keys and the schema (#13 item 15): a user revokes their own keys (and only theirs)
over GraphQL, an operator with `codeshot users revoke-key`; introspection can be off."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from codeshot import ids
from codeshot.settings import FIELDS
from tests.conftest import code

KEYS = "{ apiKeys { id current } }"
CREATE = "mutation { createApiKey { id key } }"
REVOKE = "mutation ($id: String!) { revokeApiKey(id: $id) { id current } }"
ME = "{ user { username } }"


def test_users_create_list_and_revoke_their_own_keys(platform):
    _, alice = platform.user("alice")
    _, bob = platform.user("bob")
    new = platform.gql(alice, CREATE)["data"]["createApiKey"]
    assert platform.gql(new["key"], ME)["data"]["user"]["username"] == "alice"
    listed = platform.gql(alice, KEYS)["data"]["apiKeys"]
    assert len(listed) == 2 and {k["id"] for k in listed} >= {new["id"]}
    assert [k["current"] for k in listed if k["id"] == new["id"]] == [False]

    # Bob cannot revoke, nor learn of, alice's keys: hers look like no key at all.
    theirs = platform.gql(bob, REVOKE, {"id": new["id"]})
    missing = platform.gql(bob, REVOKE, {"id": "key_nosuchkey00"})
    assert code(theirs) == code(missing) == "NOT_FOUND"
    assert theirs["errors"][0]["message"].replace(new["id"], "X") == \
        missing["errors"][0]["message"].replace("key_nosuchkey00", "X")
    assert platform.gql(new["key"], ME)["data"]["user"]["username"] == "alice"

    # Alice revokes the new key with the old one: it is refused from then on.
    assert platform.gql(alice, REVOKE, {"id": new["id"]})["data"]["revokeApiKey"] == {
        "id": new["id"], "current": False}
    assert code(platform.gql(new["key"], ME)) == "UNAUTHENTICATED"
    # The last key stays: revoking it would lock her out.
    [last] = platform.gql(alice, KEYS)["data"]["apiKeys"]
    assert last["current"] is True
    assert code(platform.gql(alice, REVOKE, {"id": last["id"]})) == "INVALID_INPUT"
    assert platform.gql(alice, ME)["data"]["user"]["username"] == "alice"


@pytest.fixture
def users_cli(live_stack_object, tmp_path):
    """`codeshot users ...` beside the live stack, as its operator runs it."""
    settings = live_stack_object.settings
    names = {f"CODESHOT_{f.name.upper()}": str(getattr(settings, f.name)) for f in FIELDS
             if f.name.endswith(("_table", "_bucket", "_secret_id"))}
    state = tmp_path / ".codeshot"
    state.mkdir()
    (state / "local.json").write_text(json.dumps(live_stack_object.state))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "codeshot.cli", "users", *args],
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
                              env={**os.environ, **names})

    return cli


def test_an_operator_revokes_a_key_from_the_command_line(live_stack_object, users_cli):
    cli = users_cli
    live_stack = live_stack_object.state
    graphql = live_stack["graphql_url"]
    key = live_stack["api_key"]
    spare = httpx.post(graphql, json={"query": CREATE},
                       headers={"Authorization": f"Bearer {key}"}).json()
    spare_key = spare["data"]["createApiKey"]["key"]

    listed = cli("keys", "local")
    assert listed.returncode == 0 and spare["data"]["createApiKey"]["id"] in listed.stdout
    revoked = cli("revoke-key", "local", spare_key)  # the key itself names it
    assert revoked.returncode == 0, revoked.stderr
    assert spare["data"]["createApiKey"]["id"] in revoked.stdout
    r = httpx.post(graphql, json={"query": ME}, headers={"Authorization": f"Bearer {spare_key}"})
    assert code(r.json()) == "UNAUTHENTICATED"
    again = cli("revoke-key", "local", spare_key)
    assert again.returncode == 2 and "NOT_FOUND" in again.stderr and "Traceback" not in \
        again.stderr


def test_an_operator_replaces_a_users_last_key(live_stack_object, users_cli):
    """Nothing could make a key for an existing user: the last one could not be revoked
    nor replaced from the command line."""
    graphql, name = live_stack_object.state["graphql_url"], f"k{ids.ulid().lower()[-8:]}"
    made = users_cli("create", name)
    assert made.returncode == 0, made.stderr
    old = made.stdout.strip()
    refused = users_cli("revoke-key", name, old)
    assert refused.returncode == 2 and refused.stderr.strip().endswith(
        f"create another before revoking it (`codeshot users new-key {name}`) "
        "(INVALID_INPUT)"), refused.stderr
    new = users_cli("new-key", name)
    assert new.returncode == 0, new.stderr
    assert users_cli("revoke-key", name, old).returncode == 0

    def whoami(key: str) -> dict:
        return httpx.post(graphql, json={"query": ME},
                          headers={"Authorization": f"Bearer {key}"}).json()

    assert code(whoami(old)) == "UNAUTHENTICATED"
    assert whoami(new.stdout.strip())["data"]["user"]["username"] == name


INTROSPECT = "{ __schema { types { name } } }"


@pytest.mark.settings(graphql_introspection=False)
def test_introspection_can_be_turned_off(platform):
    _, key = platform.user()
    out = platform.gql(key, INTROSPECT)
    assert code(out) == "INVALID_INPUT" and out.get("data") is None
    assert code(platform.gql(key, '{ __type(name: "SessionType") { name } }')) == "INVALID_INPUT"
    assert httpx.get(f"{platform.url}/graphql", headers={"Accept": "text/html"}).status_code \
        in (404, 405)
    assert platform.gql(key, ME)["data"]["user"]["username"]  # queries work as ever


def test_introspection_is_on_locally(platform):
    _, key = platform.user()
    names = {t["name"] for t in platform.gql(key, INTROSPECT)["data"]["__schema"]["types"]}
    assert "SessionType" in names
    assert "graphiql" in httpx.get(f"{platform.url}/graphql",
                                   headers={"Accept": "text/html"}).text.lower()
