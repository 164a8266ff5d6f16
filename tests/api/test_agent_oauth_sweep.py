"""Deleting, renaming or registering an agent sweeps users' OAuth tokens for its id (and a
delete the agent's corpora) before the registry changes: a sweep that fails leaves the agent as it was, and the same request
again finishes the job (swept after, the retry would find no agent and leave the tokens)."""

from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.api.test_fixie_compat import (
    AGENT_BY_ID,
    DELETE_AGENT,
    UPDATE_AGENT,
    register,
)
from tests.conftest import code

TOKEN = {"access_token": "at"}


class ThrottledDeletes:
    """The OAuth store's client with DeleteItem throttled beyond boto3's retries."""

    def __init__(self, db: Any) -> None:
        self.db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self.db, name)

    def delete_item(self, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                     "Message": "Rate of requests exceeds the allowed throughput."}},
                          "DeleteItem")


def throttle(platform, monkeypatch, store: str = "oauth"):
    """DeleteItem throttled for one of the platform's stores."""
    target = getattr(platform.services, store)
    monkeypatch.setattr(target, "db", ThrottledDeletes(target.db))


def agent(platform, key, agent_id):
    return platform.gql(key, AGENT_BY_ID, {"agentId": agent_id})["data"]["agentById"]


@pytest.mark.parametrize("failing", ["oauth", "corpora"])
def test_a_delete_whose_cleanup_fails_keeps_the_agent_and_its_retry_finishes(
        platform, handshake_agent, monkeypatch, failing):
    _, key = platform.user(f"oscar-{failing}")
    agent_id = f"oscar-{failing}/lender"
    oauth, corpora = platform.services.oauth, platform.services.corpora
    register(platform, key, handshake_agent, handle="lender")
    for user in ("u1", "u2"):
        oauth.put_token(user, agent_id, TOKEN)
    corpora.finish(corpora.start(agent_id, [{"urls": ["https://docs.example/*"]}]))
    throttle(platform, monkeypatch, failing)

    failed = platform.gql(key, DELETE_AGENT, {"handle": "lender"})
    assert code(failed) == "RATE_LIMITED"  # the client is told to retry
    assert agent(platform, key, agent_id)["handle"] == "lender"

    monkeypatch.undo()
    deleted = platform.gql(key, DELETE_AGENT, {"handle": "lender"})
    assert deleted == {"data": {"deleteAgent": {"agent": {"handle": "lender"}}}}
    assert [oauth.get_token(u, agent_id) for u in ("u1", "u2")] == [None, None]
    assert corpora.recent(agent_id) == []
    assert agent(platform, key, agent_id) is None


def test_a_rename_whose_sweep_fails_keeps_the_agent_and_its_retry_finishes(
        platform, handshake_agent, monkeypatch):
    _, key = platform.user("pia")
    oauth = platform.services.oauth
    register(platform, key, handshake_agent, handle="borrower")
    oauth.put_token("u1", "pia/borrower", TOKEN)
    oauth.put_token("u1", "pia/borrowed", TOKEN)  # a former agent's, under the new id
    throttle(platform, monkeypatch)
    rename = {"handle": "borrower", "newHandle": "borrowed"}

    assert code(platform.gql(key, UPDATE_AGENT, rename)) == "RATE_LIMITED"
    assert agent(platform, key, "pia/borrower")["handle"] == "borrower"
    assert agent(platform, key, "pia/borrowed") is None

    monkeypatch.undo()
    renamed = platform.gql(key, UPDATE_AGENT, rename)
    assert renamed == {"data": {"updateAgent": {"agent": {"agentId": "pia/borrowed"}}}}
    assert oauth.grants("u1") == []  # neither the old id's nor the former agent's is left


def test_a_registration_whose_sweep_fails_registers_nothing_and_its_retry_does(
        platform, handshake_agent, monkeypatch):
    _, key = platform.user("quinn")
    oauth = platform.services.oauth
    oauth.put_token("u1", "quinn/keeper", TOKEN)  # a deleted agent's call still in flight
    throttle(platform, monkeypatch)
    assert code(register(platform, key, handshake_agent, handle="keeper")) == "RATE_LIMITED"
    assert agent(platform, key, "quinn/keeper") is None

    monkeypatch.undo()
    created = register(platform, key, handshake_agent, handle="keeper")
    assert created == {"data": {"createAgent": {"agent": {"agentId": "quinn/keeper"}}}}
    assert oauth.grants("u1") == []


def test_a_rename_onto_a_taken_handle_keeps_both_agents_tokens(platform, handshake_agent):
    """The sweep comes first, but only once the new id is known to be free: a refused
    rename deletes no one's tokens."""
    _, key = platform.user("rita")
    oauth = platform.services.oauth
    for handle in ("atlas", "globe"):
        register(platform, key, handshake_agent, handle=handle)
        oauth.put_token("u1", f"rita/{handle}", TOKEN)
    refused = platform.gql(key, UPDATE_AGENT, {"handle": "atlas", "newHandle": "globe"})
    assert refused["errors"][0]["message"] == "agent rita/globe already exists"
    assert {g.agent_id for g in oauth.grants("u1")} == {"rita/atlas", "rita/globe"}
