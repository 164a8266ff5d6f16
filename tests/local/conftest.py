import tempfile
from pathlib import Path

import pytest

from tests.conftest import free_port


@pytest.fixture(scope="module")
def live_stack():
    """The embedded local stack in this process, as `codeshot local up` runs it."""
    from codeshot.local.stack import LocalStack

    with tempfile.TemporaryDirectory() as directory:
        stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory),
                           progress=lambda _line: None)
        state = stack.start()
        yield state
        stack.stop()
