"""The package's build configuration is whole: every folder under a shipped package is declared in
pyproject.toml's `packages`, and each data folder says which of its files ship.

setuptools counts any folder it can reach as a package, `__init__.py` or not, and prints a
forty-line "Package would be ignored" banner for each one left out of `packages`: on a first
`make serve` that read as errors. A new folder under the console (a third data folder, a new
views package) fails this test instead of bringing the banners back."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folders(package_dir: dict[str, str]) -> dict[str, Path]:
    """Every folder below each mapped package that holds files, by the dotted name it installs as."""
    found: dict[str, Path] = {}
    for name, folder in package_dir.items():
        top = ROOT / folder
        for path in [top, *top.rglob("*")]:
            if not path.is_dir() or path.name == "__pycache__" or any(p.startswith(".") for p in path.parts):
                continue
            if not any(child.is_file() for child in path.iterdir()):
                continue
            dotted = ".".join([name, *path.relative_to(top).parts])
            found[dotted] = path
    return found


def test_every_folder_of_a_shipped_package_is_declared():
    """No folder under `runstate`, `runstate.server`, ... is missing from `packages`, and none it
    names is missing from the tree."""
    config = _setuptools()
    declared = set(config["packages"])
    folders = set(_folders(config["package-dir"]))
    assert not folders - declared, f"pyproject.toml [tool.setuptools] packages lacks {sorted(folders - declared)}"
    assert not declared - folders, f"packages names folders that do not exist: {sorted(declared - folders)}"


def test_each_data_folder_ships_its_files():
    """A folder without Python files is declared with the files it ships, and each pattern matches one."""
    config = _setuptools()
    folders = _folders(config["package-dir"])
    data = config.get("package-data", {})
    for name in config["packages"]:
        folder = folders[name]
        if any(folder.glob("*.py")):
            continue
        assert name in data, f"{name} holds no Python: pyproject.toml [tool.setuptools.package-data] must list its files"
        for pattern in data[name]:
            assert any(folder.glob(pattern)), f"{name}: package-data pattern {pattern!r} matches nothing"


def test_both_sdks_have_one_version_told_by_the_changelog():
    """The Python package, the npm package (its lockfile and its user agent's VERSION) and the
    changelog's latest entry name the same release."""
    import json
    import re

    import runstate

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert runstate.__version__ == version
    package = json.loads((ROOT / "typescript" / "package.json").read_text())
    lock = json.loads((ROOT / "typescript" / "package-lock.json").read_text())
    assert package["version"] == lock["version"] == lock["packages"][""]["version"] == version
    request = (ROOT / "typescript" / "src" / "request.ts").read_text()
    assert re.search(r"export const VERSION = '([^']+)';", request).group(1) == version
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == version, f"CHANGELOG.md's latest entry is {headings[:1]}, the packages are {version}"
