"""Headless Chromium (Debian's `chromium`, installed by scripts/setup.sh) for the report tests.

- `dump_dom(page)`: `chromium --headless=new --dump-dom` of a copy of the page with a small check
  script added at the end of <body>: after the load event it writes into <body> data attributes
  how many images there are, how many loaded (complete, naturalWidth > 0) and the URLs of every
  resource the page fetched (Resource Timing; data: URIs are not fetched, so none for a
  self-contained page). Host names resolve to nothing (`--host-resolver-rules`), so a page that
  tries to fetch from outside fails to, and says so.
- `screenshot(page, path)`: `chromium --headless=new --screenshot`.
- `devtools_load(page)`: loads the page through the DevTools protocol (`--remote-debugging-pipe`)
  and returns every URL the browser requested (Network.requestWillBeSent), the images' state and the
  DOM after load: the browser's own account of what it fetched.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path

BROWSER = "chromium"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
         "--host-resolver-rules=MAP * ~NOTFOUND", "--disable-background-networking",
         "--disable-component-update", "--disable-default-apps", "--disable-sync"]
TIMEOUT_S = 60

CHECK = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; });
  var fetched = performance.getEntriesByType("resource").map(function (e) { return e.name; });
  document.body.dataset.imgs = imgs.length;
  document.body.dataset.imgsOk = ok.length;
  document.body.dataset.fetched = JSON.stringify(fetched);
  document.body.dataset.checked = "yes";
});
</script>"""

# What devtools_load evaluates after the load event: the images' state and the DOM.
STATE = """(function () {
  var imgs = Array.prototype.slice.call(document.images);
  return {imgs: imgs.length,
          ok: imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length,
          html: document.documentElement.outerHTML};
})()"""


def browser() -> str | None:
    return shutil.which(BROWSER)


def _profile(tmp: Path) -> list[str]:
    return [f"--user-data-dir={tmp / 'chromium-profile'}"]


def dump_dom(page: Path, tmp: Path) -> str:
    """The DOM of `page` after load, with the check script's results on <body> (module docstring)."""
    text = page.read_text(encoding="utf-8")
    checked = tmp / f"checked-{page.name}"
    checked.write_text(text.replace("</body>", CHECK + "\n</body>", 1), encoding="utf-8")
    r = subprocess.run([browser(), *FLAGS, *_profile(tmp), "--virtual-time-budget=20000", "--dump-dom",
                        checked.as_uri()], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def screenshot(page: Path, path: Path, tmp: Path, size: tuple[int, int] = (1400, 2400)) -> Path:
    r = subprocess.run([browser(), *FLAGS, *_profile(tmp), f"--window-size={size[0]},{size[1]}",
                        f"--screenshot={path}", page.as_uri()], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert r.returncode == 0 and path.is_file(), r.stderr[-2000:]
    return path


class _Pipe:
    """The DevTools protocol over --remote-debugging-pipe: the browser reads commands on its fd 3
    and writes replies and events on its fd 4, each a JSON message ended by a NUL byte."""

    def __init__(self, tmp: Path):
        # fd 3 <- our stdin pipe, fd 4 -> our stdout pipe; the browser's own output is discarded
        self.proc = subprocess.Popen(
            ["sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 0</dev/null 1>/dev/null 2>/dev/null', browser(), *FLAGS,
             *_profile(tmp), "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            assert left > 0, "no answer from the browser in time"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 20)
                assert chunk, "the browser closed its DevTools pipe"
                self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.proc.stdin.write(json.dumps(msg).encode() + b"\0")
        self.proc.stdin.flush()
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                assert "error" not in m, m["error"]
                return m.get("result", {})
            self.events.append(m)

    def wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        for k, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(k)
        while True:
            m = self._read(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (AssertionError, BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def devtools_load(page: Path, tmp: Path) -> dict:
    """Load `page` and return {"requested": [every URL the browser requested], "imgs", "ok", "html"}."""
    pipe = _Pipe(tmp)
    try:
        target = pipe.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = pipe.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        pipe.call("Network.enable", session=session)
        pipe.call("Page.enable", session=session)
        pipe.call("Page.navigate", {"url": page.as_uri()}, session=session)
        pipe.wait_for("Page.loadEventFired")
        state = pipe.call("Runtime.evaluate", {"expression": STATE, "returnByValue": True},
                          session=session)["result"]["value"]
        requested = [m["params"]["request"]["url"] for m in pipe.events
                     if m.get("method") == "Network.requestWillBeSent"]
        return {"requested": requested, **state}
    finally:
        pipe.close()
