"""Seed secrets owned by CloudFormation: the platform's Ed25519 signing keys, and the key
that seals users' OAuth tokens for agents.

Each is a Secrets Manager secret whose seed text CloudFormation generates at deploy time
(GenerateSecretString, in the shape a ``tables.SeedSecret`` names); the key is derived
from it (``codeshot.auth.keys``, ``codeshot.store.oauth``), so no Lambda ever creates or
writes a secret and ``cdk destroy`` deletes it with the stack. Signing keys rotate by an
operator's step that adds a key, ``codeshot keys rotate`` (see the README's deploy guide).
"""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from codeshot.store.tables import OAUTH_KEY_SECRET, SIGNING_SECRET, SeedSecret
from infra.nag import suppress

ROTATION_REASON = (
    "Signing keys rotate by adding a key, never by replacing one: API keys are JWTs "
    "signed by these keys, so a scheduled rotation that swapped the secret would revoke "
    "every API key. `codeshot keys rotate` appends a new signing key (old ones keep "
    "verifying); dropping an old key is a deliberate revocation, documented in the README.")


OAUTH_ROTATION_REASON = (
    "Users' OAuth tokens for agents are sealed with a key derived from this seed: a "
    "scheduled rotation would make every stored token unreadable (each user would have to "
    "authorize each agent again, which the platform then asks them to). Revoking is per "
    "user and agent (revokeOAuthGrant); a new seed is a deliberate operator's step.")


class SeedSecretConstruct(Construct):
    def __init__(self, scope: Construct, id: str, spec: SeedSecret, rotation_reason: str
                 ) -> None:
        super().__init__(scope, id)
        self.secret = secretsmanager.Secret(
            self, "Secret",
            description=f"{spec.description} (seed generated at deploy time)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps({}),
                generate_string_key=spec.seed_key,
                password_length=spec.seed_length,
                exclude_punctuation=True,
                include_space=False,
            ),
            # Users' data is not in it, and a new stack can never adopt an old secret.
            removal_policy=RemovalPolicy.DESTROY,
        )
        suppress(self.secret, "AwsSolutions-SMG4", rotation_reason)

    @property
    def secret_id(self) -> str:
        """The secret's ARN: what the spec's setting (CODESHOT_..._SECRET_ID) holds."""
        return self.secret.secret_arn

    def grant_read(self, role: iam.IRole) -> None:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["secretsmanager:GetSecretValue"], resources=[self.secret.secret_arn]))


class SigningKeys(SeedSecretConstruct):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id, SIGNING_SECRET, ROTATION_REASON)


class OAuthTokenKey(SeedSecretConstruct):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id, OAUTH_KEY_SECRET, OAUTH_ROTATION_REASON)
