"""tests/compat/test_official_queues.py (the official 0.2.0 client) against three nodes (see conftest.py)."""

from ...compat.test_official_queues import *  # noqa: F401,F403 (the suite's tests and fixtures, as they are)

# It kills and restarts a server of its own.
del test_results_and_work_keys_survive_a_killed_server  # noqa: F821
