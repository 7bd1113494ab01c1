"""The server as an ASGI application for any ASGI server, configured as `runstate serve` is.

    RUNSTATE_SERVER_API_KEY=... hypercorn --worker-class trio runstate.server.asgi:app

The settings come from the environment and the file `RUNSTATE_CONFIG` names (the same names as
`runstate serve`'s; its flags aside): the data directory, the keys, every limit. The application's
ASGI lifespan starts the kernel (recovering the data directory) and stops it after the server's
drain. What `runstate serve` adds on its own connections (`listener.py`: the connection cap, the
plain path, the hang-up watcher, the stop that answers what it has read) is then the ASGI server's
business; the answers, refusals and bounds of the application itself are the same.

Importing this module makes the application (it is the entry point for ASGI servers, and nothing
else imports it).
"""

from __future__ import annotations

import logging
import os

from .app import create_app
from .config import load
from .logs import setup

__all__ = ["app"]

_loaded = load({}, os.environ, None)
# The server's own lines (recovery, ready, snapshots, warnings), as `runstate serve` writes them:
# otherwise Python drops those below a warning. Request lines are the ASGI server's access log.
setup(_loaded.settings.log_format, _loaded.settings.log_level, quiet_hypercorn=False)
for _warning in _loaded.warnings:
    logging.getLogger("runstate.server").warning("%s", _warning)
app = create_app(_loaded.settings)
