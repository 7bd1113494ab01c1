"""The README documents every setting."""

from __future__ import annotations

from pathlib import Path

from runstate.server.config import SETTINGS

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_table_lists_every_setting_with_its_spellings_and_default():
    """The README's configuration table is complete: each row has the flag, variable, TOML name and default."""
    text = README.read_text()
    for setting in SETTINGS:
        row = next((line for line in text.splitlines() if line.startswith("|") and f"`{setting.env}`" in line), None)
        assert row is not None, f"README has no row for {setting.name}"
        assert f"`{setting.toml}`" in row
        if setting.flag:
            assert f"`{setting.flag}`" in row
        assert f"`{setting.describe_default()}`" in row or (setting.default is None and "none" in row)
