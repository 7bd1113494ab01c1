"""The docs document every setting: the table of docs/configuration.md, found by its heading."""

from __future__ import annotations

from pathlib import Path

from runstate.server.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
SETTINGS_HEADING = "## Settings"


def section(path: Path, heading: str) -> list[str]:
    """The lines under `heading` (a whole line such as "## Settings"), up to the next heading of its level or above."""
    lines = path.read_text().splitlines()
    level = len(heading) - len(heading.lstrip("#"))
    starts = [i for i, line in enumerate(lines) if line.strip() == heading]
    assert len(starts) == 1, f"{path.name} has {len(starts)} headings {heading!r}, expected one"
    body: list[str] = []
    in_code = False
    for line in lines[starts[0] + 1:]:
        if line.startswith("```"):
            in_code = not in_code
        marks = len(line) - len(line.lstrip("#"))
        if not in_code and 0 < marks <= level and line[marks:marks + 1] == " ":
            break
        body.append(line)
    return body


def test_the_configuration_table_lists_every_setting_with_its_spellings_and_default():
    """The configuration table is complete: each row has the flag, variable, TOML name and default."""
    rows = [line for line in section(CONFIGURATION, SETTINGS_HEADING) if line.startswith("|")]
    for setting in SETTINGS:
        row = next((line for line in rows if f"`{setting.env}`" in line), None)
        assert row is not None, f"{CONFIGURATION.name} has no row for {setting.name}"
        assert f"`{setting.toml}`" in row
        if setting.flag:
            assert f"`{setting.flag}`" in row
        assert f"`{setting.describe_default()}`" in row or (setting.default is None and "none" in row)
