"""The console ships in the package: `pip install 'runstate[server]'` needs nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from runstate.server.console.render import STATIC

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "server" / "console" / "templates"


def test_the_wheel_holds_the_consoles_templates_static_files_and_code(tmp_path):
    """Every template and static file, and every module of the console, is in the built wheel."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True, cwd=tmp_path,
    )
    (wheel,) = tmp_path.glob("runstate-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"runstate/server/console/templates/{path.name}" for path in TEMPLATES.glob("*.html")}
    wanted |= {f"runstate/server/console/static/{name}" for name in STATIC}
    wanted |= {"runstate/server/console/site.py", "runstate/server/console/views/reading.py"}
    assert wanted <= names, sorted(wanted - names)
    assert {"htmx.min.js", "htmx-LICENSE.txt", "console.js", "console.css"} <= set(STATIC)
