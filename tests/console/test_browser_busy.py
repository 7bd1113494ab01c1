"""A busy swarm in the console: a key with 200 generations in its lease swimlane, and the charts
of the space's traffic."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest
from playwright.sync_api import expect

from .conftest import Console, Tab

pytestmark = [pytest.mark.e2e, pytest.mark.browser]


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000 + 0.5)


def _iso(ms: float) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _generations(console: Console, key: str) -> list[tuple[int, int, int, str]]:
    """(generation, from, to, holder) of `key`, from its events as the API lists them."""
    events = console.api.get("/v1/spaces/default/events", params={"latest": 1000}).json()["events"]
    held, since = [], None
    for event in events:
        if event["aggregate"]["id"] != key:
            continue
        if event["type"] == "claim.acquired":
            since = (event["payload"]["generation"], _ms(event["createdAt"]), event["payload"]["holder"])
        elif event["type"] == "claim.released":
            assert since is not None and since[0] == event["payload"]["generation"]
            held.append((since[0], since[1], _ms(event["createdAt"]), since[2]))
            since = None
    return held


def _share(held: list, a: float, b: float) -> float:
    return sum(max(0.0, min(to, b) - max(since, a)) for _, since, to, _ in held) / (b - a)


def test_a_key_with_200_generations_draws_its_held_share_and_a_zoom_shows_each_generation(tab: Tab, console: Console, tmp_path):
    """200 generations of one key, a few milliseconds each: its lane is drawn in columns whose
    held share is the one the records give, column by column and in all; a drag across the lane
    zooms in; zoomed to three generations, the lane draws each with its holder."""
    run = console.run("busy")
    for n in range(200):
        taken = console.claim(run["id"], "busy:key", f"agent-{n % 7}", lease_s=5)
        assert taken.status_code == 200, taken.text
        time.sleep(0.004)
        assert console.api.post("/v1/spaces/default/claims/busy:key/release", json={"token": taken.json()["token"]}).status_code == 200
        time.sleep(0.002)
    held = _generations(console, "busy:key")
    assert len(held) == 200
    tab.sign_in()
    tab.open("/console/s/default/lanes?key=busy:")
    page = tab.page
    lane = page.locator("tr[data-lane='busy:key']")
    expect(lane).to_have_attribute("data-mode", "columns")
    svg = lane.locator("svg.lane")
    start, end = int(svg.get_attribute("data-from")), int(svg.get_attribute("data-to"))  # type: ignore[arg-type]
    assert float(svg.get_attribute("data-held-share")) == pytest.approx(_share(held, start, end), abs=2e-4)  # type: ignore[arg-type]
    columns = int(svg.get_attribute("data-columns"))  # type: ignore[arg-type]
    shares = [float(share) for share in svg.get_attribute("data-shares").split()]  # type: ignore[union-attr]
    width = (end - start) / columns
    assert len(shares) == columns and sum(1 for share in shares if share > 0) >= 3
    for index, share in enumerate(shares):
        assert share == pytest.approx(_share(held, start + index * width, start + (index + 1) * width), abs=0.002), index
    band = lane.locator("rect.band title").filter(has_text="agent-").first
    expect(band).to_contain_text("held")
    expect(lane).to_contain_text("200 generations in this window, too close together to draw one by one")
    expect(lane).to_contain_text("agent-0 (29)")
    tab.screenshot("lanes-busy", tmp_path, full_page=False)
    busy = [index for index, share in enumerate(shares) if share > 0]
    box = svg.bounding_box()
    assert box is not None
    left = box["x"] + box["width"] * busy[0] / columns
    right = box["x"] + box["width"] * (busy[-1] + 1) / columns
    page.mouse.move(left, box["y"] + 10)
    page.mouse.down()
    page.mouse.move((left + right) / 2, box["y"] + 12, steps=4)
    page.mouse.move(right, box["y"] + 12, steps=4)
    page.mouse.up()
    page.wait_for_url("**to=*")
    expect(page.locator(".axis .zoom")).to_contain_text("(zoomed)")
    zoomed = page.locator("tr[data-lane='busy:key'] svg.lane")
    assert int(zoomed.get_attribute("data-to")) - int(zoomed.get_attribute("data-from")) < (end - start) / 2  # type: ignore[arg-type]
    three = [g for g in held if g[0] in (100, 101, 102)]
    tab.open(f"/console/s/default/lanes?key=busy:&from={_iso(three[0][1] - 2)}&to={_iso(three[-1][2] + 2)}")
    lane = page.locator("tr[data-lane='busy:key']")
    expect(lane).to_have_attribute("data-mode", "bars")
    for generation, _, _, holder in three:
        expect(lane.locator(f"rect.bar[data-generation='{generation}'] title")).to_contain_text(f"generation {generation} held by {holder}")
    expect(lane.locator("ol.lane-story")).to_contain_text("generation 101: agent-2")
    tab.screenshot("lanes-zoomed", tmp_path, full_page=False)
    assert tab.errors() == []


def test_the_charts_show_the_traffic_and_move_on_live(tab: Tab, console: Console, tmp_path):
    """While a worker takes and releases a claim over and over, the charts page (left open)
    shows claims per second above zero, acquire times and the requests, and draws each new
    interval as it ends, without a reload."""
    run = console.run("charted")
    stop = threading.Event()

    def work() -> None:
        with console.server.client() as api:
            while not stop.is_set():
                taken = console.claim(run["id"], "charts:k", "charted-worker", api=api)
                if taken.status_code == 200:
                    api.post("/v1/spaces/default/claims/charts:k/release", json={"token": taken.json()["token"]})
                time.sleep(0.05)

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    try:
        tab.sign_in()
        tab.open("/console/s/default/charts?window=5m")
        tab.wait_live()
        page = tab.page
        loaded = page.evaluate("performance.timeOrigin")
        claims = "section[data-chart='operations'] path[data-series='claims']"
        page.wait_for_function(f"""() => {{
            const line = document.querySelector("{claims}");
            return line !== null && line.dataset.values.split(" ").some((v) => Number(v) > 0);
        }}""", timeout=20_000)
        first = page.locator(".axis[data-last]").get_attribute("data-last")
        page.wait_for_function(f"""() => {{
            const axis = document.querySelector(".axis[data-last]");
            return axis !== null && axis.dataset.last !== "{first}";
        }}""", timeout=12_000)
        acquire = page.locator("section[data-chart='acquire'] li[data-series='p99']")
        expect(acquire).to_contain_text("ms now")
        expect(page.locator("section[data-chart='errors'] li[data-series='requests']")).to_contain_text("/s now")
        assert page.evaluate("performance.timeOrigin") == loaded, "the page was not reloaded"
        tab.screenshot("charts", tmp_path)
    finally:
        stop.set()
        worker.join()
    assert tab.errors() == []
