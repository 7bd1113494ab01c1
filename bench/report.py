"""The table a run prints and the JSON it writes."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import orjson

# Read at import, before the bench pins itself to one core.
USABLE_CPUS = sorted(os.sched_getaffinity(0))

PASS, MISS, REFERENCE, INFO, NA = "PASS", "MISS", "reference", "info", "n/a"


@dataclass
class Row:
    leg: str
    figure: str
    reference: str = "-"
    ratio: float | None = None
    target: str = "-"
    verdict: str = INFO
    data: dict = field(default_factory=dict)


def verdict_at_least(value: float, minimum: float) -> str:
    return PASS if value >= minimum else MISS


def verdict_at_most(value: float, maximum: float) -> str:
    return PASS if value <= maximum else MISS


def n(value: float, digits: int = 0) -> str:
    """A number with thousands separators."""
    return f"{value:,.{digits}f}"


def ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"


def table(rows: list[Row]) -> str:
    header = ("leg", "figure", "reference", "ratio", "target", "verdict")
    cells = [header] + [
        (r.leg, r.figure, r.reference, "-" if r.ratio is None else f"{r.ratio:.3f}", r.target, r.verdict) for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = []
    for index, cell in enumerate(cells):
        lines.append("| " + " | ".join(text.ljust(widths[i]) for i, text in enumerate(cell)) + " |")
        if index == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def machine() -> dict:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_gib = None
    try:
        with open("/proc/meminfo") as f:
            memory_gib = round(int(f.readline().split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "usable_cores": len(USABLE_CPUS),
        "memory_gib": memory_gib,
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
    }


def git_commit(root: Path) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def write_json(path: Path, mode: str, rows: list[Row], notes: list[str], started: float, root: Path, *, complete: bool = True) -> None:
    document = {
        "mode": mode,
        "complete": complete,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "elapsed_s": round(time.time() - started, 1),
        "commit": git_commit(root),
        "machine": machine(),
        "rows": [asdict(r) for r in rows],
        "notes": notes,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))
