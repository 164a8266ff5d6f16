import time

import pytest

from codeshot.errors import InvalidInput, OAuthBrowserMismatch, OAuthStateInvalid
from codeshot.store import oauth
from codeshot.store.oauth import Flow, OAuthStore
from codeshot.store.provision import create_seed_secret
from codeshot.store.tables import OAUTH_KEY_SECRET

TOKEN = {"access_token": "at-1", "refresh_token": "rt-1", "expires_at": 1.7e9,
         "token_type": "Bearer", "scope": "books.read"}


CALLBACK = "https://p.example/api/oauth/callback"
PROVIDER = "https://auth.example/authorize?state="


def open_flow(store: OAuthStore, user: str = "u1", agent: str = "acme/books") -> Flow:
    flow = Flow.new(user, agent, "s1", CALLBACK)
    store.start_flow(flow, PROVIDER + flow.state)
    return flow


def test_a_flow_is_taken_once_and_only_before_it_expires(aws):
    store = OAuthStore(aws)
    flow = open_flow(store)
    assert 43 <= len(flow.code_verifier) <= 128  # RFC 7636
    assert store.open_flow(flow.state, "browser-1") == PROVIDER + flow.state
    assert store.take_flow(flow.state, "browser-1") == flow
    with pytest.raises(OAuthStateInvalid, match="already used or expired"):
        store.take_flow(flow.state, "browser-1")
    with pytest.raises(OAuthStateInvalid):
        store.open_flow(flow.state, "browser-1")

    stale = open_flow(store)
    store.open_flow(stale.state, "browser-1")
    store.db.update_item(  # its time ran out (DynamoDB's TTL deletes it only later)
        TableName=store.table_name, Key={"pk": {"S": "STATE#" + stale.state}, "sk": {"S": "STATE"}},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": {"N": str(int(time.time()) - 1)}})
    with pytest.raises(OAuthStateInvalid):
        store.open_flow(stale.state, "browser-1")
    with pytest.raises(OAuthStateInvalid):
        store.take_flow(stale.state, "browser-1")
    for forged in ("", "x" * 129, "never-issued"):
        with pytest.raises(OAuthStateInvalid):
            store.take_flow(forged, "browser-1")


def test_a_flow_is_bound_to_the_first_browser_that_opens_its_link(aws):
    store = OAuthStore(aws)
    flow = open_flow(store)
    with pytest.raises(OAuthBrowserMismatch, match="did not open"):  # never opened
        store.take_flow(flow.state, None)
    with pytest.raises(OAuthBrowserMismatch, match="started in another browser"):
        store.take_flow(flow.state, "browser-1")
    store.open_flow(flow.state, "browser-1")
    assert store.open_flow(flow.state, "browser-1") == PROVIDER + flow.state  # again: fine
    with pytest.raises(OAuthBrowserMismatch, match="opened in another browser first"):
        store.open_flow(flow.state, "browser-2")
    for other in (None, "", "browser-2"):
        with pytest.raises(OAuthBrowserMismatch):
            store.take_flow(flow.state, other)
    item = store.db.get_item(TableName=store.table_name, Key={
        "pk": {"S": "STATE#" + flow.state}, "sk": {"S": "STATE"}})["Item"]
    assert "browser-1" not in str(item)  # only its hash is kept
    assert store.take_flow(flow.state, "browser-1") == flow  # refusals left it as it was


def test_forgetting_an_agent_deletes_its_flows_and_every_users_token(aws, monkeypatch):
    monkeypatch.setattr(oauth, "PAGE", 8)  # 31 keys: the index is read in four pages
    store = OAuthStore(aws)
    users = [f"u{n}" for n in range(30)]
    for user in users:
        store.put_token(user, "acme/books", TOKEN)
    store.put_token("u1", "acme/other", TOKEN)
    flow, kept = open_flow(store, "u40"), open_flow(store, "u40", "acme/other")
    assert store.forget_agent("acme/books") == 31
    assert [store.get_token(u, "acme/books") for u in users] == [None] * 30
    assert store.grants("u1")[0].agent_id == "acme/other"
    with pytest.raises(OAuthStateInvalid):
        store.open_flow(flow.state, "browser-1")
    # Another agent's token and flow stay; a second pass finds nothing.
    assert store.get_token("u1", "acme/other") == TOKEN
    assert store.open_flow(kept.state, "browser-1") == PROVIDER + kept.state
    assert store.forget_agent("acme/books") == 0


def test_tokens_are_sealed_for_their_user_and_agent(aws):
    store = OAuthStore(aws)
    store.put_token("u1", "acme/books", TOKEN)
    assert store.get_token("u1", "acme/books") == TOKEN
    assert store.get_token("u2", "acme/books") is None
    assert store.get_token("u1", "acme/other") is None
    key = {"pk": {"S": "USER#u1"}, "sk": {"S": "AGENT#acme/books"}}
    item = store.db.get_item(TableName=store.table_name, Key=key)["Item"]
    assert b"at-1" not in item["sealed"]["B"] and b"rt-1" not in item["sealed"]["B"]

    # Copied under another user (a bug, an operator's mistake): it does not open there.
    store.db.put_item(TableName=store.table_name, Item={
        **item, "pk": {"S": "USER#u2"}})
    assert store.get_token("u2", "acme/books") is None
    # Nor under another seed (a new stack that kept the old table): the user asks again.
    other = aws.replace(oauth_key_secret_id="codeshot/oauth-other")
    create_seed_secret(other, OAUTH_KEY_SECRET)
    assert OAuthStore(other).get_token("u1", "acme/books") is None

    assert [g.agent_id for g in store.grants("u1")] == ["acme/books"]
    assert store.delete_token("u1", "acme/books") is True
    assert store.delete_token("u1", "acme/books") is False
    assert store.grants("u1") == []


@pytest.mark.parametrize(("token", "problem"), [
    ({}, "access_token"),
    ({"access_token": ""}, "access_token"),
    ({"access_token": "a", "refresh_token": 7}, "refresh_token must be text"),
    ({"access_token": "a", "expires_at": "soon"}, "expires_at must be a number"),
    ({"access_token": "a" * 20_000}, "exceeds 16000 bytes"),
])
def test_a_malformed_token_is_refused_and_writes_nothing(aws, token, problem):
    store = OAuthStore(aws)
    with pytest.raises(InvalidInput, match=problem):
        store.put_token("u1", "acme/books", token)
    assert store.grants("u1") == []
