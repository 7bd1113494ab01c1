"""The benchmark suite: `make bench` (full) and `make bench-quick`; see bench/README.md."""
