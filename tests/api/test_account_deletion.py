"""Deleting one's account over GraphQL and in the console: confirmed by the username,
refused at once afterwards (every key), the name never taken again. The erasure itself
is the runner's (tests/runner/test_user_erasure.py)."""

import re

import httpx

from codeshot.store.queue import Work
from tests.conftest import code

DELETE = "mutation ($name: String!) { deleteAccount(confirmUsername: $name) }"
ME = "{ user { username } }"


def test_deleting_ones_account_refuses_every_key_at_once(platform):
    user_id, key = platform.user("carol")
    spare = platform.gql(key, "mutation { createApiKey { key } }")["data"]["createApiKey"]["key"]
    _, other = platform.user("dave")

    wrong = platform.gql(key, DELETE, {"name": "dave"})
    assert code(wrong) == "INVALID_INPUT" and "username" in wrong["errors"][0]["message"]
    assert platform.gql(key, ME)["data"]["user"]["username"] == "carol"  # nothing done

    assert platform.gql(key, DELETE, {"name": "carol"})["data"]["deleteAccount"] is True
    for each in (key, spare):
        refused = platform.gql(each, ME)
        assert code(refused) == "UNAUTHENTICATED"
        assert "deleted" in refused["errors"][0]["message"]
    assert platform.gql(other, ME)["data"]["user"]["username"] == "dave"
    assert platform.services.users.get(user_id).deleted is not None
    # The name stays taken: nobody signs up as carol and gets carol/<handle> agent ids.
    assert platform.services.users.get_by_username("carol").user_id == user_id


def test_the_consoles_delete_asks_for_the_username(platform):
    user_id, key = platform.user("erin")
    page = {"Authorization": f"Bearer {key}", "HX-Request": "true", "HX-Target": "main"}
    account = httpx.get(f"{platform.url}/console/account", headers=page)
    assert re.search(r'hx-post="/console/account/delete"', account.text)

    typo = httpx.post(f"{platform.url}/console/account/delete", headers=page,
                      data={"username": "erim"})
    assert typo.status_code == 400 and "type your username" in typo.text
    assert platform.gql(key, ME)["data"]["user"]["username"] == "erin"

    done = httpx.post(f"{platform.url}/console/account/delete", headers=page,
                      data={"username": "erin"})
    assert done.status_code == 200 and "erin is deleted" in done.text
    assert code(platform.gql(key, ME)) == "UNAUTHENTICATED"
    queued = [Work.parse(m["Body"]) for m in platform.services.queue.receive(wait_seconds=0)]
    assert Work.erase(user_id) in queued


def test_an_operator_deletes_a_user_on_the_users_page_and_cannot_enable_them_again(platform):
    operator_id, operator_key = platform.user("opal")
    platform.services.users.set_flag(operator_id, "operator", True)
    user_id, key = platform.user("fred")
    page = {"Authorization": f"Bearer {operator_key}", "HX-Request": "true",
            "HX-Target": "main"}
    users = httpx.get(f"{platform.url}/console/users", headers=page)
    assert 'hx-post="/console/users/fred/delete"' in users.text
    assert 'hx-post="/console/users/opal/delete"' not in users.text  # not oneself here

    done = httpx.post(f"{platform.url}/console/users/fred/delete", headers=page)
    assert done.status_code == 200 and "fred is deleted" in done.text
    assert code(platform.gql(key, ME)) == "UNAUTHENTICATED"
    [row] = re.findall(r'<tr data-user="fred">.*?</tr>', done.text, re.S)
    state = row.split("</form>")[-1]  # the state cell: no enable, disable or delete left
    assert "deleted" in state and "hx-post" not in state

    again = httpx.post(f"{platform.url}/console/users/fred/enable", headers=page)
    assert again.status_code == 400 and "INVALID_INPUT" in again.text and \
        "is deleted" in again.text
    assert code(platform.gql(key, ME)) == "UNAUTHENTICATED"
    assert platform.services.users.get(user_id).deleted is not None
