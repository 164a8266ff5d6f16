"""An agent's call token names the registration it was issued to: a call of a deleted
agent still in flight (its token lives minutes) reaches neither the user storage nor the
OAuth tokens of the next agent registered at that id, even if issued in the second of
that registration; the new agent's own calls reach both."""

import httpx
import jwt

from codeshot.store.user_storage import Holder
from tests.runner.conftest import register, send, session

DELETE = "mutation ($h: String!) { deleteAgent(agentData: {handle: $h}) { agent { handle } } }"


def last_token(agents, call: str) -> str:
    """The bearer token of the runner's last call ``call`` ("<agent path>/<func>")."""
    return next(auth for made, _, auth in reversed(agents.calls) if made == call
                ).removeprefix("Bearer ")


def writes(platform, token: str) -> list[httpx.Response]:
    """What the agent does with a call's token: stores a value and an OAuth token."""
    auth = {"Authorization": f"Bearer {token}"}
    return [httpx.post(f"{platform.url}/api/userstorage/vera/keeper/note",
                       json={"data": '"written"'}, headers=auth, timeout=30),
            httpx.put(f"{platform.url}/api/oauth/token",
                      json={"token": {"access_token": "at"}}, headers=auth, timeout=30)]


def test_a_deleted_agents_call_in_flight_cannot_write_for_the_next_agent_of_its_id(live,
                                                                                    agents):
    user_id, key = live.user("vera")
    register(live, key, "keeper", agents.url + "/keeper")
    send(live, key, session(live, key, frontend="vera/keeper"), "Roll 1d20")
    old = last_token(agents, "keeper/roll")
    assert [r.status_code for r in writes(live, old)] == [200, 200]  # its agent's, now

    assert "errors" not in live.gql(key, DELETE, {"h": "keeper"})
    register(live, key, "keeper", agents.url + "/keeper")
    agent = live.services.registry.get("vera/keeper")
    created = int(agent.created.timestamp())
    claims = jwt.decode(old, options={"verify_signature": False})
    # The old call's token as if issued in the second of the new registration, which its
    # whole-second iat cannot tell apart; and one of an older platform (no registration
    # in it) issued before the registration.
    same_second = live.services.auth.sign({**claims, "iat": created})
    unstamped = {k: v for k, v in claims.items() if k != "reg"}
    older_platform = live.services.auth.sign({**unstamped, "iat": created - 2})
    tokens = {"old": old, "same second": same_second, "older platform": older_platform}
    codes = {(name, what): r.json().get("error", {}).get("code")
             for name, token in tokens.items()
             for what, r in zip(("storage", "oauth"), writes(live, token), strict=True)}
    assert codes == dict.fromkeys(codes, "NOT_FOUND")
    assert live.services.storage.list_keys(Holder(user_id, agent.agent_id, agent.registration)
                                           ).items == []
    assert live.services.oauth.get_token(user_id, "vera/keeper") is None

    send(live, key, session(live, key, frontend="vera/keeper"), "Roll 1d20")
    new = last_token(agents, "keeper/roll")
    assert [r.status_code for r in writes(live, new)] == [200, 200]  # the new agent's
    assert live.services.storage.get(Holder(user_id, agent.agent_id, agent.registration),
                                     "note") == '"written"'
