"""The accounts' user pool in the platform template: the rules the local stack's pool has
too, the console's client, identity providers switched on by settings (their secrets read
from Secrets Manager at deploy time), and who may administer users."""

from __future__ import annotations

import json

import pytest

from codeshot.auth.cognito import POOL
from infra.components.accounts import ADMIN_ACTIONS, CONTEXT_KEY
from infra.settings_env import env_name
from tests.infra.cfn import text
from tests.infra.test_platform_stack import API, REGISTER, RUNNER

PROVIDERS = {"google": {"clientId": "google-id.apps.example", "clientSecretName": "codeshot/google"},
             "github": {"clientId": "Iv1.github", "clientSecretName": "codeshot/github",
                        "issuerUrl": "https://github-oidc.example.com"}}


def only(template, kind: str) -> tuple[str, dict]:
    [(logical_id, resource)] = template.of_type(kind).items()
    return logical_id, resource


def test_the_pool_signs_up_by_email_with_the_local_stacks_password_policy(synth):
    pool_id, pool = only(synth.platform, "AWS::Cognito::UserPool")
    props = pool["Properties"]
    assert props["UsernameAttributes"] == ["email"]
    assert props["AutoVerifiedAttributes"] == ["email"]
    assert props["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is False  # self sign-up
    assert props["VerificationMessageTemplate"]["DefaultEmailOption"] == "CONFIRM_WITH_CODE"
    # codeshot/store/provision.py makes the local pool with the same policy.
    assert props["Policies"]["PasswordPolicy"] == POOL.password_policy()
    assert props["Policies"]["PasswordPolicy"]["MinimumLength"] >= 12
    assert (props["MfaConfiguration"], props["EnabledMfas"]) == ("OPTIONAL",
                                                                 ["SOFTWARE_TOKEN_MFA"])
    assert props["AccountRecoverySetting"]["RecoveryMechanisms"] == [
        {"Name": "verified_email", "Priority": 1}]
    assert props["UserPoolTier"] == "LITE"  # not CloudFormation's default, Essentials
    # Accounts are users' data: kept on destroy, and protected like the tables.
    assert pool["DeletionPolicy"] == "Retain" and props["DeletionProtection"] == "ACTIVE"
    assert synth.platform.env(API)[env_name("user_pool_id")] == {"Ref": pool_id}


def test_sign_up_codes_go_through_ses_when_an_address_is_given(synth, tmp_path):
    """Cognito's own sender stops at about 50 emails a day for the account."""
    from tests.infra.conftest import synthesize

    _, pool = only(synth.platform, "AWS::Cognito::UserPool")
    assert "EmailConfiguration" not in pool["Properties"]  # Cognito's own, by default
    _, pool = only(synthesize(tmp_path, **{"codeshot:sesFromEmail": "signup@example.com"}
                              ).platform, "AWS::Cognito::UserPool")
    email = pool["Properties"]["EmailConfiguration"]
    assert email["EmailSendingAccount"] == "DEVELOPER"
    assert email["From"] == "signup@example.com"
    assert "identity/signup@example.com" in json.dumps(email["SourceArn"])


def test_the_console_client_signs_in_with_a_password_and_has_no_secret(synth):
    client_id, client = only(synth.platform, "AWS::Cognito::UserPoolClient")
    props = client["Properties"]
    assert props["GenerateSecret"] is False  # the platform calls Cognito's public API
    assert set(props["ExplicitAuthFlows"]) == set(POOL.auth_flows)
    assert (props["IdTokenValidity"], props["TokenValidityUnits"]["IdToken"]) == (
        POOL.id_token_minutes, "minutes")
    assert props["PreventUserExistenceErrors"] == "ENABLED"
    assert props["SupportedIdentityProviders"] == ["COGNITO"]
    assert props["AllowedOAuthFlowsUserPoolClient"] is False  # no providers: no OAuth
    assert synth.platform.env(API)[env_name("user_pool_client_id")] == {"Ref": client_id}
    for handler in (RUNNER, REGISTER):  # only the API signs people in
        assert env_name("user_pool_client_id") not in synth.platform.env(handler)


def test_no_identity_provider_unless_settings_name_one(synth):
    assert synth.platform.of_type("AWS::Cognito::UserPoolIdentityProvider") == {}
    assert synth.platform.of_type("AWS::Cognito::UserPoolDomain") == {}
    assert env_name("user_pool_domain") not in synth.platform.env(API)


def test_google_and_github_are_switched_on_by_settings_with_secrets_from_secrets_manager(
        tmp_path):
    from tests.infra.conftest import synthesize

    platform = synthesize(tmp_path, **{CONTEXT_KEY: PROVIDERS}).platform
    providers = {p["Properties"]["ProviderName"]: p["Properties"]
                 for p in platform.of_type("AWS::Cognito::UserPoolIdentityProvider").values()}
    assert set(providers) == {"Google", "GitHub"}
    google, github = providers["Google"], providers["GitHub"]
    assert (google["ProviderType"], github["ProviderType"]) == ("Google", "OIDC")
    assert google["ProviderDetails"]["client_id"] == "google-id.apps.example"
    assert github["ProviderDetails"]["client_id"] == "Iv1.github"
    assert github["ProviderDetails"]["oidc_issuer"] == "https://github-oidc.example.com"
    # The secrets are dynamic references: CloudFormation resolves them, the template
    # never holds them.
    assert text(google["ProviderDetails"]["client_secret"]).startswith(
        "{{resolve:secretsmanager:codeshot/google:SecretString:")
    assert text(github["ProviderDetails"]["client_secret"]).startswith(
        "{{resolve:secretsmanager:codeshot/github:SecretString:")
    assert google["AttributeMapping"] == {"email": "email"}
    assert github["AttributeMapping"] == {"email": "email"}

    [client] = platform.of_type("AWS::Cognito::UserPoolClient").values()
    props = client["Properties"]
    assert set(props["SupportedIdentityProviders"]) == {"COGNITO", "Google", "GitHub"}
    assert props["AllowedOAuthFlows"] == ["code"]
    [callback] = [text(u) for u in props["CallbackURLs"]]
    assert callback.endswith("/console/auth/callback")
    domain_id, _ = only(platform, "AWS::Cognito::UserPoolDomain")  # the hosted pages
    assert json.dumps(props).count("resolve:secretsmanager") == 0
    # The console offers both, signing in through the pool's hosted pages.
    env = platform.env(API)
    assert env[env_name("user_pool_providers")] == "Google,GitHub"
    assert domain_id in text(env[env_name("user_pool_domain")])


@pytest.mark.parametrize(("value", "message"), [
    ({"facebook": {"clientId": "x"}}, "unknown providers"),
    ({"google": {"clientId": "x"}}, "google needs clientSecretName"),
    ({"github": {"clientId": "x", "clientSecretName": "s"}}, "github needs issuerUrl"),
])
def test_incomplete_identity_provider_settings_are_refused(tmp_path, value, message):
    from tests.infra.conftest import synthesize

    with pytest.raises(ValueError, match=message):
        synthesize(tmp_path, **{CONTEXT_KEY: value})


def test_only_the_api_administers_users_and_only_to_find_disable_enable_or_delete_them(
        synth):
    t = synth.platform
    pool_id, _ = only(t, "AWS::Cognito::UserPool")
    assert t.actions_on(API, pool_id) == set(ADMIN_ACTIONS)
    for handler in (API, RUNNER, REGISTER):
        cognito = {a for a in t.all_actions(handler) if a.startswith("cognito-idp:")}
        assert cognito == (set(ADMIN_ACTIONS) if handler == API else set()), handler
