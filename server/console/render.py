"""Templates and static files: Jinja2 with autoescaping, and the files under `static/`.

Every value a template prints is escaped (autoescape on, no `|safe` of caller data), and an
undefined name is an error rather than an empty string, so a template mistake fails a test
instead of showing an empty column. Static files are served from a list made at import (no path
from a request ever reaches the file system), each with a content hash in its URL so that it can
be cached for a year and still change with a new version.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from markupsafe import Markup, escape

from ...actors.timestamps import format_ms

__all__ = ["render", "render_block", "STATIC", "static_url", "CONTENT_TYPES"]

HERE = Path(__file__).resolve().parent
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


def _static_files() -> dict[str, tuple[bytes, str, str]]:
    """name -> (content, content type, short hash), for every file of `static/` (read once)."""
    files = {}
    for path in sorted((HERE / "static").iterdir()):
        if path.is_file() and path.suffix in CONTENT_TYPES:
            content = path.read_bytes()
            files[path.name] = (content, CONTENT_TYPES[path.suffix], hashlib.sha256(content).hexdigest()[:12])
    return files


STATIC = _static_files()


def static_url(name: str) -> str:
    return f"/console/static/{name}?v={STATIC[name][2]}"


def _when(value: Any, countdown: bool = False, precise: bool = False) -> Markup:
    """A wire timestamp as a `<time>` the page shows in local, UTC or relative time (the
    visitor's choice); `countdown` makes it count down to (or up from) that moment, `precise`
    shows its milliseconds (a zoomed swimlane's generations are milliseconds apart)."""
    if value is None or value == "":
        return Markup('<span class="none">—</span>')
    text = escape(value)
    attribute = (" data-countdown" if countdown else "") + (" data-precise" if precise else "")
    return Markup(f'<time datetime="{text}"{attribute}>{text}</time>')


_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(HERE / "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["when"] = _when
_ENV.filters["iso"] = format_ms
# A value as one path segment: `urlencode` keeps "/", which would split a holder such as
# "node-1/worker-3" into two segments and name another route.
_ENV.filters["segment"] = lambda value: quote(str(value), safe="")
# The macros every page uses (`templates/macros.html`) are globals, so that a page's live region
# rendered alone (`render_block`) has them as the whole page does.
_ENV.globals.update(
    (name, getattr(_ENV.get_template("macros.html").module, name))
    for name in ("state", "pager", "json", "run_link", "worker_link", "event_table", "payload")
)
_ENV.globals["static_url"] = static_url


def render(name: str, context: dict[str, Any]) -> str:
    return _ENV.get_template(name).render(context)


def render_block(name: str, block: str, context: dict[str, Any]) -> str:
    """One block of a template (what a live region reloads), rendered alone."""
    template = _ENV.get_template(name)
    return "".join(template.blocks[block](template.new_context(context)))
