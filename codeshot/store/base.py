"""The base of every DynamoDB repository: the client and the physical table name."""

from __future__ import annotations

from typing import Any, ClassVar

from codeshot import aws
from codeshot.settings import Settings
from codeshot.store.tables import Table


class Repository:
    table: ClassVar[Table]

    def __init__(self, settings: Settings, dynamodb: Any | None = None) -> None:
        self.settings = settings
        self.db = dynamodb or aws.client("dynamodb", settings)
        self.table_name: str = getattr(settings, self.table.setting)
