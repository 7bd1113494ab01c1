// The runstate console in the browser: one event stream per tab, live regions reloaded in place,
// times shown as the visitor chose, dark mode, and errors shown as errors.
//
// Regions: an element with `data-live="claim task ..."` (aggregate types, `*` for any, `fenced`
// for refused stale writes, `charts` for a new bucket of the space's charts) and `hx-get`/`hx-trigger="rs:refresh"` is reloaded by htmx when an
// event of those types arrives, at most once per REFRESH_MS. The stream is opened at the cursor
// the page was rendered at (`data-cursor`), so nothing falls between the page and the stream; the
// browser's own reconnect resumes from the last event id it saw.

const REFRESH_MS = 250;
const REOPEN_MS = 3000;
const body = document.body;
const store = {
  get: (name, fallback) => { try { return localStorage.getItem("runstate." + name) ?? fallback; } catch { return fallback; } },
  set: (name, value) => { try { localStorage.setItem("runstate." + name, value); } catch { /* private mode */ } },
};

// -- times ---------------------------------------------------------------------------------------

let timeMode = store.get("time", "local");

function relative(ms) {
  const s = Math.round(Math.abs(ms) / 1000);
  const text = s < 60 ? `${s} s` : s < 3600 ? `${Math.floor(s / 60)} min ${s % 60} s` : s < 86400 ? `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min` : `${Math.floor(s / 86400)} d`;
  return ms >= 0 ? `in ${text}` : `${text} ago`;
}

const PRECISE = { year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3 };

function showTime(el, now) {
  const iso = el.getAttribute("datetime");
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return;
  let text;
  if (el.hasAttribute("data-countdown") || timeMode === "relative") text = relative(at - now);
  else if (timeMode === "utc") text = iso.replace("T", " ").replace("Z", " UTC");
  else if (el.hasAttribute("data-precise")) text = new Date(at).toLocaleString(undefined, PRECISE);
  else text = new Date(at).toLocaleString();
  if (el.textContent !== text) el.textContent = text;
  el.title = iso;
}

function showTimes(root) {
  const now = Date.now();
  root.querySelectorAll("time[datetime]").forEach((el) => showTime(el, now));
}

// -- preferences ----------------------------------------------------------------------------------

function setTheme(theme) {
  document.documentElement.dataset.theme = theme;
  document.cookie = `runstate_theme=${theme}; Path=/console; Max-Age=31536000; SameSite=Strict`;
  const button = document.getElementById("theme");
  if (button) button.textContent = `Theme: ${theme}`;
}

function controls() {
  const mode = document.getElementById("time-mode");
  if (mode) {
    mode.value = timeMode;
    mode.addEventListener("change", () => { timeMode = mode.value; store.set("time", timeMode); showTimes(document); });
  }
  const theme = document.getElementById("theme");
  if (theme) {
    theme.textContent = `Theme: ${document.documentElement.dataset.theme || "auto"}`;
    theme.addEventListener("click", () => {
      const order = ["auto", "light", "dark"];
      setTheme(order[(order.indexOf(document.documentElement.dataset.theme || "auto") + 1) % order.length]);
    });
  }
  document.querySelectorAll("select[data-navigate]").forEach((select) =>
    select.addEventListener("change", () => { if (select.value) window.location.assign(select.value); }));
}

// -- errors shown as errors -----------------------------------------------------------------------

function showError(text) {
  const banner = document.getElementById("error-banner");
  if (!banner) return;
  banner.textContent = text;
  banner.hidden = false;
}

function clearError() {
  const banner = document.getElementById("error-banner");
  if (banner) banner.hidden = true;
}

document.addEventListener("htmx:responseError", (e) => {
  const xhr = e.detail.xhr;
  showError(`Could not reload this view (${xhr.status}): ${xhr.responseText || xhr.statusText}`);
});
document.addEventListener("htmx:sendError", () => showError("Could not reach the server; the view shows what it last read."));
document.addEventListener("htmx:afterSwap", (e) => { clearError(); showTimes(e.target); brushes(e.target); });

// -- live regions ---------------------------------------------------------------------------------

const pending = new WeakMap();

function refresh(el) {
  if (brushing) { setTimeout(() => refresh(el), REFRESH_MS); return; }  // not under a drag
  if (pending.get(el)) return;
  pending.set(el, true);
  setTimeout(() => { pending.delete(el); window.htmx.trigger(el, "rs:refresh"); }, REFRESH_MS);
}

function refreshFor(kind) {
  document.querySelectorAll("[data-live]").forEach((el) => {
    const kinds = el.dataset.live.split(/\s+/);
    if (kind === "*" || kinds.includes("*") || kinds.includes(kind)) refresh(el);
  });
}

// Regions whose data makes no event (pools, quotas, budgets) also look again every few seconds.
function everySoOften() {
  document.querySelectorAll("[data-refresh-every]").forEach((el) => {
    const seconds = Number(el.dataset.refreshEvery);
    if (seconds > 0) setInterval(() => { if (!paused()) refresh(el); }, seconds * 1000);
  });
}

// -- zooming a lease swimlane ----------------------------------------------------------------------

// Drag across a lane (an SVG that says its window: `data-from`, `data-to`, in wall ms) to zoom
// every lane to that stretch; a click zooms to a sixteenth of the window around it. The zoom is
// in the URL (`from`, `to`), so it can be shared, and the server draws it.
const ZOOM_MS_MIN = 10;
let brushing = false;

function zoomTo(a, b) {
  const url = new URL(window.location.href);
  url.searchParams.set("from", new Date(a).toISOString());
  url.searchParams.set("to", new Date(b).toISOString());
  url.searchParams.delete("window");
  window.location.assign(url.toString());
}

function brushes(root) {
  root.querySelectorAll("svg.lane[data-from]").forEach((svg) => {
    const from = Number(svg.dataset.from);
    const to = Number(svg.dataset.to);
    const shade = svg.querySelector("rect.brush");
    let start = null;
    const at = (e) => {
      const box = svg.getBoundingClientRect();
      return Math.min(1, Math.max(0, (e.clientX - box.left) / box.width));
    };
    svg.addEventListener("pointerdown", (e) => {
      start = at(e);
      brushing = true;
      svg.setPointerCapture(e.pointerId);
      shade.setAttribute("x", String(start * 100));
      shade.setAttribute("width", "0");
      e.preventDefault();
    });
    svg.addEventListener("pointermove", (e) => {
      if (start === null) return;
      const x = at(e);
      shade.setAttribute("x", String(Math.min(start, x) * 100));
      shade.setAttribute("width", String(Math.abs(x - start) * 100));
    });
    svg.addEventListener("pointerup", (e) => {
      if (start === null) return;
      const x = at(e);
      const left = Math.min(start, x);
      const right = Math.max(start, x);
      start = null;
      brushing = false;
      let a = from + left * (to - from);
      let b = from + right * (to - from);
      if ((right - left) * svg.getBoundingClientRect().width < 4) {
        const half = (to - from) / 32;
        a -= half;
        b += half;
      }
      a = Math.max(from, Math.round(a));
      b = Math.min(to, Math.max(Math.round(b), a + ZOOM_MS_MIN));
      zoomTo(b - a < ZOOM_MS_MIN ? b - ZOOM_MS_MIN : a, b);
    });
  });
}

// -- the stream -----------------------------------------------------------------------------------

let source = null;
let lastId = Number(body.dataset.cursor || 0);
const status = () => document.getElementById("live-status");
const pause = () => document.getElementById("pause-live");
const paused = () => pause() !== null && pause().checked;

function setStatus(text, kind) {
  const el = status();
  if (!el) return;
  el.textContent = text;
  el.className = kind;
}

function open() {
  if (!body.dataset.stream || source) return;
  source = new EventSource(`${body.dataset.stream}?after=${lastId}`);
  body.dataset.streamState = "connecting";
  source.addEventListener("open", () => { setStatus("live", "live"); body.dataset.streamState = "open"; });
  source.addEventListener("change", (e) => {
    lastId = Number(e.lastEventId) || lastId;
    body.dataset.lastEvent = String(lastId);
    const event = JSON.parse(e.data);
    refreshFor(event.aggregate.type);
  });
  source.addEventListener("fenced", () => refreshFor("fenced"));
  // (a region of any event is not one of the charts: only those that name them redraw)
  source.addEventListener("charts", () => document.querySelectorAll("[data-live~='charts']").forEach(refresh));
  source.addEventListener("reset", (e) => { lastId = Number(e.lastEventId) || lastId; refreshFor("*"); });
  source.addEventListener("signedout", () => window.location.assign("/console/login"));
  source.addEventListener("error", () => {
    if (source && source.readyState === EventSource.CLOSED) {
      // Refused (signed out, or the server is back without this space): a reload of the page's
      // regions says which (a signed-out tab is sent to sign in), then the stream is tried again.
      source = null;
      setStatus("offline", "down");
      refreshFor("*");
      setTimeout(() => { if (!paused()) open(); }, REOPEN_MS);
    } else {
      setStatus("reconnecting…", "down");
    }
  });
}

function close() {
  if (source) source.close();
  source = null;
}

function live() {
  const box = pause();
  if (box) {
    box.checked = store.get("paused", "0") === "1";
    box.addEventListener("change", () => {
      store.set("paused", box.checked ? "1" : "0");
      if (box.checked) { close(); setStatus("paused", ""); }
      else { open(); refreshFor("*"); }
    });
  }
  if (paused()) setStatus("paused", "");
  else open();
}

// -- the time scrubber ------------------------------------------------------------------------------

// Dragging the scrubber's range (wall ms from the oldest point kept to now) writes the moment into
// its `at` field as it moves, and shows the page at that moment once let go. A page of the past
// (`data-at` on the body) keeps its moment as the visitor moves on: every link to another page
// of the space, and every filter form, carries it (but those marked `data-now`).
function scrubber() {
  const range = document.getElementById("scrub-range");
  const field = document.getElementById("scrub-at");
  if (range && field) {
    const moment = () => new Date(Number(range.value)).toISOString();
    range.addEventListener("input", () => { field.value = range.value === range.max ? "" : moment(); });
    range.addEventListener("change", () => {
      field.value = range.value === range.max ? "" : moment();
      field.form.requestSubmit();
    });
  }
  const at = body.dataset.at;
  if (!at) return;
  const space = `/console/s/${encodeURIComponent(body.dataset.space)}/`;
  document.querySelectorAll("a[href]").forEach((a) => {
    const url = new URL(a.href, window.location.href);
    if (a.hasAttribute("data-now") || url.origin !== window.location.origin || !url.pathname.startsWith(space)) return;
    if (url.pathname.endsWith("/stream") || url.searchParams.has("at")) return;
    url.searchParams.set("at", at);
    a.href = url.pathname + url.search + url.hash;
  });
  document.querySelectorAll("form").forEach((form) => {
    if (form.hasAttribute("data-now") || (form.method || "get").toLowerCase() !== "get" || form.querySelector("[name='at']")) return;
    const hidden = document.createElement("input");
    hidden.type = "hidden";
    hidden.name = "at";
    hidden.value = at;
    form.appendChild(hidden);
  });
}

controls();
scrubber();
showTimes(document);
brushes(document);
setInterval(() => showTimes(document), 1000);
everySoOften();
live();
