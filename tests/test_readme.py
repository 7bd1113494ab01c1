"""The docs document every setting (the table of docs/configuration.md, found by its heading), and the
README's testing snippet runs as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from runstate.server.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION = ROOT / "docs" / "configuration.md"
README = ROOT / "README.md"
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


def test_the_configuration_table_is_the_one_the_settings_print():
    """docs/configuration.md says `python -m runstate.server.config` prints its table: it is that table, row for row."""
    from runstate.server.config import markdown_table

    rows = [line for line in section(CONFIGURATION, SETTINGS_HEADING) if line.startswith("|")]
    assert rows == markdown_table().splitlines()


# The comment that marks the testing snippet, wherever the docs keep it (README.md or docs/*.md).
SNIPPET_MARKER = "<!-- runstate-testing-snippet"


def _testing_snippet() -> tuple[Path, str]:
    """The first ```python block after the marker, in the first document that has the marker."""
    root = README.parent
    for document in [README, *sorted((root / "docs").glob("**/*.md"))]:
        text = document.read_text()
        if SNIPPET_MARKER not in text:
            continue
        after = text[text.index(SNIPPET_MARKER):]
        start = after.index("```python\n") + len("```python\n")
        return document, after[start:after.index("\n```", start) + 1]
    raise AssertionError(f"no document has the marker {SNIPPET_MARKER!r}")


def test_the_testing_snippet_runs_verbatim_under_pytest(tmp_path):
    """The documented testing snippet, saved as a test file unchanged, passes under pytest with pytest-trio."""
    document, snippet = _testing_snippet()
    assert "runstate.testing.serve()" in snippet and "runstate.testing.crash(" in snippet
    (tmp_path / "test_snippet.py").write_text(snippet)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # the user's own, empty settings
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_snippet.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, f"{document.name}:\n{done.stdout}\n{done.stderr}"
    assert "1 passed" in done.stdout
