"""The SDK's UserStorage and OAuthHandler against the real platform: a refused call is
an error the Func sees, never a write that silently went nowhere."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

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


@pytest.fixture
def moved(platform) -> Iterator[str]:
    """The platform's old address: every request is answered 301 to the platform (as an
    http:// URL in front of an https API, or a moved host, answers)."""

    class Moved(http.server.BaseHTTPRequestHandler):
        def answer(self) -> None:
            self.send_response(301)
            self.send_header("Location", platform.url + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = answer

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Moved)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def test_storage_behind_a_redirect_raises_instead_of_answering_or_writing_nowhere(
        platform, moved):
    claims = registered(platform, "erin")
    storage = UserStorage(claims, moved + "/api/userstorage")
    for use in (lambda: "k" in storage, lambda: storage.__setitem__("k", 1),
                lambda: storage["k"], lambda: storage.__delitem__("k"), lambda: len(storage)):
        with pytest.raises(AgentException) as refused:
            use()
        assert refused.value.error_code == "ERR_USERSTORAGE"
        assert f"HTTP 301: a redirect to {platform.url}/api/userstorage" in \
            refused.value.error_message
    assert len(UserStorage(claims, platform.url + "/api/userstorage")) == 0  # nothing written


def test_oauth_behind_a_redirect_raises_instead_of_answering_or_saving_nowhere(platform, moved):
    handler = OAuthHandler(PARAMS, registered(platform, "frank"), moved)
    for use in (handler.user_token, handler.get_authorization_url,
                lambda: handler._save({"access_token": "t", "token_type": "Bearer"})):
        with pytest.raises(AgentException) as refused:
            use()
        assert refused.value.error_code == "ERR_OAUTH"
        assert "HTTP 301: a redirect to" in refused.value.error_message
