from pathlib import Path

import pytest

from codeshot.devtools.testing import agent_server, codeshot_platform  # noqa: F401 (fixtures)


@pytest.fixture(scope="session")
def agent_dir() -> Path:
    return Path(__file__).resolve().parent.parent
