"""The SDK's UserStorage and OAuthHandler against the real platform: a refused call is
an error the Func sees, never a write that silently went nowhere."""

from __future__ import annotations

import pytest

from codeshot.sdk import OAuthHandler, OAuthParams, UserStorage
from codeshot.sdk.auth import Claims
from codeshot.sdk.wire import AgentException
from codeshot.usecases.registration import AgentFields, AgentRegistration
from codeshot.usecases.users import principal_of

PARAMS = OAuthParams("client", "secret", "https://books.example/auth",
                     "https://books.example/token", ["read"])


def registered(platform, owner: str) -> Claims:
    """A user's call token for a newly registered agent of ``owner``."""
    user_id, _ = platform.user(owner)
    principal = principal_of(platform.services.users.get(user_id))
    agent = AgentRegistration(platform.services, charge=None).create(
        principal, "notes", AgentFields(base_prompt="You answer.", few_shots=["Q: hi\nA: hello"]))
    token = platform.services.auth.agent_token(agent.agent_id, user_id, "s1", agent.registration)
    return Claims(agent.agent_id, user_id, "s1", token)


@pytest.mark.parametrize("key", [".", "..", ""])
def test_keys_a_url_cannot_carry_are_refused_not_sent_elsewhere(platform, key):
    storage = UserStorage(registered(platform, "alice"), platform.url + "/api/userstorage")
    storage["real"] = "v"
    with pytest.raises(ValueError, match="cannot be a user storage key"):
        storage[key] = "kept?"
    assert key not in storage
    with pytest.raises(KeyError):
        storage[key]
    with pytest.raises(KeyError):
        del storage[key]
    assert sorted(storage) == ["real"]


def test_storage_writes_and_lists_after_the_agent_is_deleted_raise_not_found(platform):
    claims = registered(platform, "bob")
    storage = UserStorage(claims, platform.url + "/api/userstorage")
    storage["before"] = 1
    platform.services.registry.delete(claims.agent_id, owner="bob")  # while a call runs
    with pytest.raises(AgentException) as written:
        storage["after"] = 2
    assert written.value.error_code == "NOT_FOUND"
    assert "deleted agent" in written.value.error_message
    with pytest.raises(AgentException) as listed:
        len(storage)
    assert listed.value.error_code == "NOT_FOUND"
    assert "after" not in storage  # reading one key: a 404 is "no such key"


def test_storage_at_a_wrong_url_raises_instead_of_writing_nowhere(platform):
    storage = UserStorage(registered(platform, "carol"), platform.url + "/api/nowhere")
    with pytest.raises(AgentException) as written:
        storage["k"] = 1
    assert "HTTP 404" in written.value.error_message
    with pytest.raises(AgentException):
        list(storage)


def test_oauth_calls_after_the_agent_is_deleted_raise_not_found(platform):
    claims = registered(platform, "dave")
    handler = OAuthHandler(PARAMS, claims, platform.url)
    assert handler.user_token() is None  # not authorized yet
    platform.services.registry.delete(claims.agent_id, owner="dave")
    with pytest.raises(AgentException) as asked:
        handler.get_authorization_url()
    assert asked.value.error_code == "NOT_FOUND"
    with pytest.raises(AgentException) as saved:
        handler._save({"access_token": "t", "token_type": "Bearer"})  # what authorize() ends with
    assert saved.value.error_code == "NOT_FOUND"
