"""Deleting one's account over GraphQL (`deleteAccount`) and a user with the CLI (`codeshot
users delete`): refused at once, the erasure queued past every credential's life."""

from __future__ import annotations

from tests.conftest import code

DELETE = "mutation($u: String!) { deleteAccount(confirmUsername: $u) }"


def queued(platform) -> dict[str, str]:
    return platform.services.erasure_queue.sqs.get_queue_attributes(
        QueueUrl=platform.services.erasure_queue.url, AttributeNames=["All"])["Attributes"]


def test_a_user_deletes_their_account_and_every_key_is_refused_at_once(platform):
    user_id, key = platform.user("dora")
    spare = platform.gql(key, "mutation { createApiKey { key } }")["data"]["createApiKey"]["key"]
    _, other = platform.user("otto")

    wrong = platform.gql(key, DELETE, {"u": "otto"})
    assert code(wrong) == "INVALID_INPUT" and "username" in wrong["errors"][0]["message"]
    assert platform.services.users.get(user_id).deleted is None
    assert queued(platform)["ApproximateNumberOfMessagesDelayed"] == "0"

    assert platform.gql(key, DELETE, {"u": "dora"}) == {"data": {"deleteAccount": True}}
    for credential in (key, spare):
        refused = platform.gql(credential, "{ user { username } }")
        assert code(refused) == "UNAUTHENTICATED" and "deleted" in refused["errors"][0]["message"]
    assert platform.gql(other, "{ user { username } }")["data"]["user"]["username"] == "otto"
    # Queued, delayed past the credentials checked before: nothing erased yet.
    assert queued(platform)["ApproximateNumberOfMessagesDelayed"] == "1"


def test_the_consoles_delete_button_deletes_only_with_the_username_typed(platform):
    import httpx

    user_id, key = platform.user("cora")
    page = {"Authorization": f"Bearer {key}", "HX-Request": "true", "HX-Target": "main"}
    account = httpx.get(f"{platform.url}/console/account", headers=page)
    assert 'hx-post="/console/account/delete"' in account.text
    wrong = httpx.post(f"{platform.url}/console/account/delete", headers=page,
                       data={"username": "nora"})
    assert wrong.status_code == 400 and platform.services.users.get(user_id).deleted is None
    done = httpx.post(f"{platform.url}/console/account/delete", headers=page,
                      data={"username": "cora"})
    assert done.status_code == 200 and "cora is deleted" in done.text
    # When the erasure starts: how long it takes depends on how much there is.
    assert "the erasure of your data starts in about 17 minutes" in done.text
    assert "files are kept" not in done.text  # this stack's sessions table is marked
    assert httpx.get(f"{platform.url}/console/account", headers=page).status_code == 401
    # Operators see the tombstone as deleted, with nothing to change.
    op_id, op_key = platform.user("opal")
    platform.services.users.set_flag(op_id, "operator", True)
    users = httpx.get(f"{platform.url}/console/users",
                      headers=page | {"Authorization": f"Bearer {op_key}"}).text
    row = users.split('data-user="cora"')[1].split("</tr>")[0]
    assert '<span class="badge">deleted</span>' in row and "hx-post" not in row
