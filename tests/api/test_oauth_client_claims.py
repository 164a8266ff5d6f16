"""An OAuth client (a client id at an authorization server) is its first owner's: another
owner's agent naming it would have users authorize that owner's app and receive the code.
Every spelling of the server's host is one claim (the review found `:443` and a trailing
dot were others)."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from codeshot.store.oauth import CLIENT_PREFIX
from codeshot.usecases.registration import AgentFields, AgentRegistration
from codeshot.usecases.users import principal_of

SHOT = "Q: Roll 1d20\nAsk Func[roll]: 1d20\nFunc[roll] says: 7\nA: You rolled 7."
GOOGLE = "https://accounts.google.com/o/oauth2/v2/auth"


def agent_of(platform, owner: str) -> str:
    user_id, _ = platform.user(owner)
    principal = principal_of(platform.services.users.get(user_id))
    return AgentRegistration(platform.services, charge=None).create(
        principal, "mail", AgentFields(base_prompt="I read mail.", few_shots=[SHOT],
                                       func_url="http://127.0.0.1:9/")).agent_id


def ask(platform, agent_id: str, user_id: str, auth_uri: str, client_id: str
        ) -> httpx.Response:
    token = platform.services.auth.agent_token(agent_id, user_id, "s_1")
    return httpx.post(f"{platform.url}/api/oauth/authorizations",
                      json={"authUri": auth_uri, "clientId": client_id, "scopes": ["mail"]},
                      headers={"Authorization": f"Bearer {token}"}, timeout=30)


def provider_url(platform, link: str) -> str:
    state = parse_qs(urlsplit(link).query)["state"][0]
    return platform.services.oauth.peek_flow(state, None).authorize_url


@pytest.mark.parametrize("auth_uri", [
    "https://accounts.google.com:443/o/oauth2/v2/auth",
    "https://accounts.google.com./o/oauth2/v2/auth",
    "https://ACCOUNTS.Google.COM/o/oauth2/v2/auth",
    "https://\uff41ccounts.google.com/o/oauth2/v2/auth",  # a full-width "a": the same name
])
def test_another_spelling_of_the_host_is_the_same_claim(platform, auth_uri):
    victim = agent_of(platform, "victor")
    user_id, _ = platform.user("uma")
    assert ask(platform, victim, user_id, GOOGLE, "victor-app").status_code == 200
    mallory = agent_of(platform, "mallory")
    refused = ask(platform, mallory, user_id, auth_uri, "victor-app")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "FORBIDDEN"
    assert refused.json()["error"]["message"].endswith("another owner's: an agent asks for "
                                                       "authorizations with its own owner's "
                                                       "client")
    assert platform.services.usage.used("oauth", f"{user_id}#{mallory}", "minute") == 0
    # " victor-app" is that client too; the victim's own agent may spell the host any way,
    # and its users are sent to the host as one spells it.
    assert ask(platform, mallory, user_id, GOOGLE, " victor-app ").status_code == 403
    link = ask(platform, victim, user_id, auth_uri, "victor-app")
    assert link.status_code == 200
    assert provider_url(platform, link.json()["url"]).startswith(GOOGLE + "?")


def test_a_port_that_is_not_the_schemes_is_another_server(platform):
    victim = agent_of(platform, "vera")
    user_id, _ = platform.user("ursula")
    assert ask(platform, victim, user_id, GOOGLE, "vera-app").status_code == 200
    other = agent_of(platform, "otto")
    elsewhere = ask(platform, other, user_id, "https://accounts.google.com:8443/o", "vera-app")
    assert elsewhere.status_code == 200
    assert provider_url(platform, elsewhere.json()["url"]).startswith(
        "https://accounts.google.com:8443/o?")


@pytest.mark.parametrize("auth_uri", ["https://victor@accounts.google.com/o",
                                      "https://accounts.google.com:99999/o",
                                      "https://a..b/o"])
def test_an_auth_uri_with_a_user_or_a_bad_host_is_refused(platform, auth_uri):
    agent_id = agent_of(platform, "ivy")
    user_id, _ = platform.user("una")
    refused = ask(platform, agent_id, user_id, auth_uri, "ivy-app")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "INVALID_INPUT"
    assert platform.services.usage.used("oauth", f"{user_id}#{agent_id}", "minute") == 0


@pytest.mark.parametrize("auth_uri", ["https://my_tenant.auth0.com/authorize",
                                      "https://r3---sn-ab.example.com/o",
                                      "https://xn--ls8h.la/o"])
def test_a_host_name_browsers_resolve_is_accepted_as_written(platform, auth_uri):
    """IDNA's rules for new names refused these, which browsers and DNS take."""
    agent_id = agent_of(platform, "nell")
    user_id, _ = platform.user("nia")
    link = ask(platform, agent_id, user_id, auth_uri, "nell-app")
    assert link.status_code == 200, link.text
    assert provider_url(platform, link.json()["url"]).startswith(auth_uri + "?")


def test_a_claim_stored_under_another_spelling_before_still_works(platform):
    """A claim written before hosts were normalised (under `host:443`) is no longer
    read: its owner's agent claims the host's one spelling on its next request."""
    agent_id = agent_of(platform, "olga")
    oauth = platform.services.oauth
    oauth.db.put_item(TableName=oauth.table_name,
                      Item={"pk": {"S": CLIENT_PREFIX + "accounts.google.com:443"},
                            "sk": {"S": "olga-app"}, "owner": {"S": "olga"}})
    user_id, _ = platform.user("ulla")
    assert ask(platform, agent_id, user_id, "https://accounts.google.com:443/o/oauth2/v2/auth",
               "olga-app").status_code == 200
    intruder = agent_of(platform, "ivan")
    assert ask(platform, intruder, user_id, GOOGLE, "olga-app").status_code == 403
