"""The simulation's slice of `make test`: seeds 1 to SIM_SEEDS (CI_SEEDS, 24, by default; `make
sim` runs 300 and `make soak` new seeds for as long as asked) and the seeds that once found a defect
(FOUND_SEEDS), of agents, workers and crashes, and no invariant broken in any.

Each seed is a test class of its own (`TestSeed17`), so that pytest's processes share the batch:
`make test` runs `--dist loadscope`, which hands a process a file's tests together, or a class's
(only these and the schemathesis run's shares are classes), and tests/conftest.py puts these last, to fill the processes to the
end. The batch is then no longer the one test the whole suite waits for. Each seed runs in a
process of its own, as it did in the batch's pool. A failing seed's test names it;
`make sim SEED=n` replays it.
"""

from __future__ import annotations

import os

from .runner import CI_SEEDS, FOUND_SEEDS, run_seed_apart

SEEDS = int(os.environ.get("SIM_SEEDS", str(CI_SEEDS)))


class _Seed:
    """One seed of the batch (a subclass per seed, below, sets `seed`)."""

    seed: int

    def test_breaks_no_invariant(self) -> None:
        result = run_seed_apart(self.seed)
        assert result.virtual_s > 0 and result.stats["checks"] > 0, result.describe()  # it ran, and the oracle looked
        assert not result.violations, result.describe() + f"\n  replay: make sim SEED={self.seed}"


for _number in sorted({*range(1, SEEDS + 1), *FOUND_SEEDS}):
    globals()[f"TestSeed{_number}"] = type(f"TestSeed{_number}", (_Seed,), {"seed": _number, "__module__": __name__})
