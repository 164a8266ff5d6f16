"""pytest fixtures for agent authors: a local platform and the agent served against it.

In an agent's ``tests/conftest.py``::

    from codeshot.devtools.testing import agent_server, codeshot_platform  # noqa: F401

    @pytest.fixture(scope="session")
    def agent_dir() -> Path:
        return Path(__file__).resolve().parent.parent

``agent_server`` is a :class:`~codeshot.devtools.agents.ServedAgent` with a fresh user per
test; call Funcs with ``agent_server.client.call(name, text)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from codeshot.devtools.agents import LocalPlatform, ServedAgent, local_platform, serve_agent_dir


@pytest.fixture(scope="session")
def codeshot_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPlatform]:
    with local_platform(tmp_path_factory.mktemp("codeshot-platform")) as platform:
        yield platform


@pytest.fixture
def agent_server(codeshot_platform: LocalPlatform, agent_dir: Path) -> Iterator[ServedAgent]:
    with serve_agent_dir(agent_dir, codeshot_platform) as served:
        yield served
