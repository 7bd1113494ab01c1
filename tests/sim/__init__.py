"""Deterministic simulation of the whole server under crashes: `make sim`, `make sim SEED=n`, `make soak`.

`runner.py` runs seeds; `cluster.py` is the server (real routes, kernel, WAL, snapshots and
recovery) on a disk that can lose power (`disk.py`), reached by the SDK through an in-process
transport; `agents.py` are the users; `oracle.py` holds the invariants.
"""
