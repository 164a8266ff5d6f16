"""The platform's Ed25519 signing keys, owned by CloudFormation.

A Secrets Manager secret whose seed text CloudFormation generates at deploy time
(GenerateSecretString, in the shape ``tables.SIGNING_SECRET`` names); the first key is
derived from it (``codeshot.auth.keys``), so no Lambda ever creates or writes a secret
and ``cdk destroy`` deletes it with the stack. Rotation is an operator's step that adds a
key, ``codeshot keys rotate`` (see the README's deploy guide).
"""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from codeshot.store.tables import SIGNING_SECRET
from infra.nag import suppress

ROTATION_REASON = (
    "Signing keys rotate by adding a key, never by replacing one: API keys are JWTs "
    "signed by these keys, so a scheduled rotation that swapped the secret would revoke "
    "every API key. `codeshot keys rotate` appends a new signing key (old ones keep "
    "verifying); dropping an old key is a deliberate revocation, documented in the README.")


class SigningKeys(Construct):
    def __init__(self, scope: Construct, id: str) -> None:
        super().__init__(scope, id)
        self.secret = secretsmanager.Secret(
            self, "Secret",
            description="codeshot Ed25519 signing keys (seed generated at deploy time)",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template=json.dumps({}),
                generate_string_key=SIGNING_SECRET.seed_key,
                password_length=SIGNING_SECRET.seed_length,
                exclude_punctuation=True,
                include_space=False,
            ),
            # Users' data is not in it, and a new stack can never adopt an old secret.
            removal_policy=RemovalPolicy.DESTROY,
        )
        suppress(self.secret, "AwsSolutions-SMG4", ROTATION_REASON)

    @property
    def secret_id(self) -> str:
        """The secret's ARN: what CODESHOT_SIGNING_SECRET_ID holds."""
        return self.secret.secret_arn

    def grant_read(self, role: iam.IRole) -> None:
        role.add_to_principal_policy(iam.PolicyStatement(
            actions=["secretsmanager:GetSecretValue"], resources=[self.secret.secret_arn]))
