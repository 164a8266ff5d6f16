"""The base of every DynamoDB repository: the client and the physical table name."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from codeshot import aws
from codeshot.settings import Settings
from codeshot.store.tables import Table

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient


class Repository:
    table: ClassVar[Table]

    def __init__(self, settings: Settings, dynamodb: DynamoDBClient | None = None) -> None:
        self.settings = settings
        self.db = dynamodb or aws.client("dynamodb", settings)
        self.table_name: str = getattr(settings, self.table.setting)
