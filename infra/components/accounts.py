"""Accounts: the Cognito user pool people sign up in (email, verified by a code), the
console's app client, and optionally Google and GitHub as identity providers.

The pool's rules come from ``codeshot.auth.cognito.POOL``, which the local stack uses to
make the same pool on moto. Identity providers are switched on by the
``codeshot:identityProviders`` context setting, which names each provider's client id and
the Secrets Manager secret holding its client secret (never the secret itself):

    {"google": {"clientId": "...", "clientSecretName": "codeshot/google"},
     "github": {"clientId": "...", "clientSecretName": "codeshot/github",
                "issuerUrl": "https://..."}}

GitHub's OAuth is not OpenID Connect, so GitHub is reached through an OIDC issuer that
wraps it (``issuerUrl``), as Cognito's OIDC providers need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aws_cdk import Aws, Duration, RemovalPolicy, SecretValue
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_iam as iam
from constructs import Construct, Node

from codeshot.auth.cognito import CONSOLE_CALLBACK, POOL
from infra.nag import suppress
from infra.settings_env import settings_env

CONTEXT_KEY = "codeshot:identityProviders"
# What the API calls with its role: an operator disabling or enabling a user turns their
# sign-in off or on, a deleted user's account goes (codeshot/usecases/accounts.py), each
# after finding the account's username by its sub (ListUsers: a Google or GitHub
# account's username is not its sub). Sign-up, confirmation and sign-in are Cognito's
# public calls, authorised by the app client, not by IAM.
ADMIN_ACTIONS = ("cognito-idp:ListUsers", "cognito-idp:AdminDisableUser",
                 "cognito-idp:AdminEnableUser", "cognito-idp:AdminDeleteUser")
PROVIDERS = {"google": ("clientId", "clientSecretName"),
             "github": ("clientId", "clientSecretName", "issuerUrl")}


@dataclass(frozen=True)
class IdentityProviders:
    """``codeshot:identityProviders``: each provider switched on, with its settings."""

    settings: dict[str, dict[str, str]]

    @classmethod
    def of(cls, node: Node) -> IdentityProviders:
        raw: Any = node.try_get_context(CONTEXT_KEY) or {}
        if isinstance(raw, str):  # -c 'codeshot:identityProviders={...}'
            import json

            raw = json.loads(raw)
        unknown = set(raw) - set(PROVIDERS)
        if unknown:
            raise ValueError(f"{CONTEXT_KEY}: unknown providers {sorted(unknown)}; "
                             f"known: {sorted(PROVIDERS)}")
        for name, values in raw.items():
            missing = [k for k in PROVIDERS[name] if not (values or {}).get(k)]
            if missing:
                raise ValueError(f"{CONTEXT_KEY}.{name} needs {', '.join(missing)}")
        return cls(dict(raw))


class Accounts(Construct):
    def __init__(self, scope: Construct, id: str, *, api_url: str, retain: bool,
                 deletion_protection: bool, ses_from_email: str = "") -> None:
        super().__init__(scope, id)
        providers = IdentityProviders.of(self.node)
        self.pool = cognito.UserPool(
            self, "UserPool",
            self_sign_up_enabled=True,
            sign_in_aliases=cognito.SignInAliases(email=True),
            auto_verify=cognito.AutoVerifiedAttrs(email=True),
            account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
            password_policy=cognito.PasswordPolicy(
                min_length=POOL.password_min_length,
                require_lowercase="lowercase" in POOL.password_classes,
                require_uppercase="uppercase" in POOL.password_classes,
                require_digits="numbers" in POOL.password_classes,
                require_symbols="symbols" in POOL.password_classes),
            # Lite has all this pool uses (sign-up, TOTP, federation, the classic hosted
            # pages); Essentials, the default, costs 2.7 times as much per active user.
            feature_plan=cognito.FeaturePlan.LITE,
            mfa=cognito.Mfa.OPTIONAL,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            deletion_protection=deletion_protection,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            # In the stack's region (known at deploy; CDK wants it named for SES).
            email=cognito.UserPoolEmail.with_ses(from_email=ses_from_email, ses_region=Aws.REGION)
            if ses_from_email else None,
        )
        suppress(self.pool, "AwsSolutions-COG2",
                 "MFA is optional on purpose: people sign up by themselves with an email, and "
                 "each may turn on an authenticator app; requiring it would keep them out.")
        suppress(self.pool, "AwsSolutions-COG8",
                 "Threat protection (advanced security) needs the paid Plus feature plan; a "
                 "deploying team turns it on when it wants it.")
        supported = [cognito.UserPoolClientIdentityProvider.COGNITO]
        federated: list[cognito.IUserPoolIdentityProvider] = []
        if "google" in providers.settings:
            google = providers.settings["google"]
            federated.append(cognito.UserPoolIdentityProviderGoogle(
                self, "Google", user_pool=self.pool, client_id=google["clientId"],
                client_secret_value=SecretValue.secrets_manager(google["clientSecretName"]),
                scopes=["openid", "email"],
                attribute_mapping=cognito.AttributeMapping(
                    email=cognito.ProviderAttribute.GOOGLE_EMAIL)))
            supported.append(cognito.UserPoolClientIdentityProvider.GOOGLE)
        if "github" in providers.settings:
            github = providers.settings["github"]
            oidc = cognito.UserPoolIdentityProviderOidc(
                self, "GitHub", user_pool=self.pool, name="GitHub",
                client_id=github["clientId"],
                # A dynamic reference: CloudFormation reads the secret at deploy time.
                client_secret=SecretValue.secrets_manager(
                    github["clientSecretName"]).unsafe_unwrap(),
                issuer_url=github["issuerUrl"], scopes=["openid", "email"],
                attribute_request_method=cognito.OidcAttributeRequestMethod.GET,
                attribute_mapping=cognito.AttributeMapping(
                    email=cognito.ProviderAttribute.other("email")))
            federated.append(oidc)
            supported.append(cognito.UserPoolClientIdentityProvider.custom("GitHub"))
        self.domain = self.pool.add_domain("Domain", cognito_domain=cognito.CognitoDomainOptions(
            domain_prefix=f"codeshot-{Aws.ACCOUNT_ID}")) if federated else None
        self.client = self.pool.add_client(
            "ConsoleClient", user_pool_client_name=POOL.console_client,
            generate_secret=False,
            auth_flows=cognito.AuthFlow(user_password="ALLOW_USER_PASSWORD_AUTH"
                                        in POOL.auth_flows),
            prevent_user_existence_errors=True,
            id_token_validity=Duration.minutes(POOL.id_token_minutes),
            supported_identity_providers=supported,
            # Google and GitHub sign in through Cognito's hosted pages, back to the console.
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(authorization_code_grant=True),
                scopes=[cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL],
                callback_urls=[api_url + CONSOLE_CALLBACK]) if federated else None,
            disable_o_auth=not federated,
        )
        for provider in federated:
            self.client.node.add_dependency(provider)
        self.providers = [p.name for p in supported[1:]]

    def env(self) -> dict[str, str]:
        """The API's settings naming the pool, the console's client and, with identity
        providers, the hosted pages they sign in through."""
        federated = settings_env(user_pool_domain=self.domain.base_url(),
                                 user_pool_providers=",".join(self.providers)) \
            if self.domain else {}
        return settings_env(user_pool_id=self.pool.user_pool_id,
                            user_pool_client_id=self.client.user_pool_client_id) | federated

    def grant_admin(self, role: iam.IRole) -> None:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=list(ADMIN_ACTIONS), resources=[self.pool.user_pool_arn]))
