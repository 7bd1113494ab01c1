"""No code of ours reaches a private member of a dependency (hypercorn, h11, trio, quart, httpx...).

A minor release of a dependency may change its private members without a word, and no test of
ours would name what broke. The checker (`private_members.py`) walks the syntax tree of every
module of the four packages; the tests below also hold it to what it must and must not report,
so that a clean tree means something.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .private_members import check_source, check_tree

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("actors", "server", "sdk", "snapshots")


def test_no_module_of_ours_reaches_a_private_member_of_a_dependency():
    findings = [str(finding) for finding in check_tree([ROOT / name for name in PACKAGES], ROOT)]
    assert findings == []


@pytest.mark.parametrize("source, words", [
    ("from trio._core import Deadlines\n", "private module"),
    ("import trio._core._run\n", "private module"),
    ("from h11 import _util\n", "private name"),
    ("import trio\nx = trio._core\n", "trio._core"),
    ("import trio\nasync def f():\n    async with trio.open_nursery() as n:\n        n._closed\n", "n._closed"),
    ("import h11\nc = h11.Connection(h11.SERVER)\nc._process_event\n", "c._process_event"),
    ("import trio\ndef f(stream: trio.SocketStream | None):\n    return stream._send_conflict_detector\n", "stream._send_conflict_detector"),
    ("import trio\nclass A:\n    def __init__(self, s: 'trio.SocketStream'):\n        self.s = s\n    def f(self):\n        return self.s._socket\n",
     "self.s._socket"),
    ("from hypercorn.config import Config\nconfig = Config()\nconfig._quic_addresses\n", "config._quic_addresses"),
    ("from hypercorn.config import Config\ngetattr(Config(), '_quic_addresses')\n", "getattr"),
    ("from hypercorn.protocol.h11 import H11Protocol\nclass P(H11Protocol):\n    async def _handle_events(self):\n        pass\n",
     "overrides hypercorn.protocol.h11.H11Protocol._handle_events"),
    ("from hypercorn.protocol.h11 import H11Protocol\nclass P(H11Protocol):\n    async def go(self):\n        await self._send_h11_event(None)\n",
     "self._send_h11_event"),
    ("from hypercorn.protocol.h11 import H11Protocol\nclass P(H11Protocol):\n    async def go(self):\n        await super()._close_stream()\n",
     "super()._close_stream"),
    ("from hypercorn.trio.task_group import TaskGroup\nclass T(TaskGroup):\n    pass\nasync def f():\n    async with T() as group:\n"
     "        group._nursery.start_soon(f)\n", "group._nursery"),
    ("from hypercorn.trio.tcp_server import TCPServer\nclass C(TCPServer):\n    def f(self, g):\n        self._task_group = g\n",
     "self._task_group"),
])
def test_each_kind_of_reach_is_found(source: str, words: str):
    findings = check_source(source)
    assert findings and any(words in finding.what for finding in findings), findings


@pytest.mark.parametrize("source", [
    "import trio\nclass Ours:\n    def __init__(self):\n        self._lock = trio.Lock()\n    async def f(self):\n        await self._lock.acquire()\n",
    "from hypercorn.protocol.h11 import H11Protocol\nclass P(H11Protocol):\n    def _ours_alone(self):\n        return self._ours\n",
    "import os\nos._exit\n",  # the standard library is not a dependency
    "from .doors import _helper\n_helper()\n",
    "import trio\nx = trio.lowlevel.current_statistics().tasks_living\n",
    "import h11\nc = h11.Connection(h11.SERVER)\nc.__class__\n",
    "import trio\ndef f(stream: trio.SocketStream):\n    stream = make()\n    return stream._ours\n",
])
def test_our_own_private_names_are_not_reported(source: str):
    assert check_source(source) == []
