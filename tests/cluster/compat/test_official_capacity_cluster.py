"""tests/compat/test_official_capacity.py (the official 0.2.0 client) against three nodes (see conftest.py)."""

from ...compat.test_official_capacity import *  # noqa: F401,F403 (the suite's tests and fixtures, as they are)
