"""The product page's Python examples run as written with our SDK against a real server process.

The same script runs with the official 0.2.0 client in `tests/compat/test_official_queues.py`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from ..compat.product_page import PRODUCT_PAGE_EXAMPLES, check_product_page_result

pytestmark = pytest.mark.e2e

PRELUDE = """
import asyncio, json, os, signal
from runstate import AsyncRunstate
ARGS = json.loads(os.environ["TEST_ARGS"])

def emit(**fields):
    print(json.dumps(fields), flush=True)
"""


def test_tasks_consume_receive_and_send_examples_run_with_our_sdk(module_server):
    """Submit twice to one task, consume it to a result, re-attach by id, send with a work key, receive."""
    env = {
        **os.environ,
        "RUNSTATE_BASE_URL": module_server.base_url,
        "RUNSTATE_API_KEY": module_server.api_key,
        "RUNSTATE_SPACE_ID": module_server.space_id,
        "TEST_ARGS": json.dumps({"mailbox": f"research-{uuid.uuid4().hex[:8]}"}),
    }
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(PRODUCT_PAGE_EXAMPLES)],
        capture_output=True, text=True, env=env, timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    check_product_page_result(json.loads(done.stdout.strip().splitlines()[-1]))
