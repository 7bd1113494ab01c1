"""The MCP client of these tests runs under asyncio (what MCP clients use)."""

import pytest


@pytest.fixture
def anyio_backend():
    return "asyncio"
