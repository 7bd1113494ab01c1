"""tests/compat/test_official_coordination.py (the official 0.2.0 client) against three nodes (see conftest.py)."""

from ...compat.test_official_coordination import *  # noqa: F401,F403 (the suite's tests and fixtures, as they are)

# It restarts a server of its own.
del test_a_watch_resumed_after_a_restart_sees_no_gap_and_no_duplicate  # noqa: F821
