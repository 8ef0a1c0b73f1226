"""A headless Debian ``chromium`` driven over the Chrome DevTools Protocol (CDP).

The browser is the system package (``scripts/system-deps.sh`` installs it), so nothing downloads a
browser build; the protocol runs over the browser's own websocket, spoken with the small
``websocket-client`` package. Every page keeps the JavaScript exceptions and console errors it
produced so a test can assert the page ran cleanly.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--hide-scrollbars",
    "--mute-audio",
)
STARTUP_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0
POLL_INTERVAL_S = 0.1


class CdpError(RuntimeError):
    """The browser answered a command with an error, or a script threw."""


def chromium_binary() -> str | None:
    """The system Chromium, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@dataclass
class Page:
    """One browser tab, spoken to over its DevTools websocket."""

    ws_url: str
    exceptions: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _events: list[dict[str, Any]] = field(default_factory=list)
    _ws: websocket.WebSocket | None = None

    def connect(self) -> Page:
        self._ws = websocket.create_connection(
            self.ws_url, timeout=CALL_TIMEOUT_S, suppress_origin=True
        )
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")
        return self

    def close(self) -> None:
        if self._ws is not None:
            self._ws.close()
            self._ws = None

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one command and return its result, recording events that arrive meanwhile."""
        if self._ws is None:
            raise CdpError("page is not connected")
        message_id = next(self._ids)
        self._ws.send(json.dumps({"id": message_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") == message_id:
                if "error" in message:
                    raise CdpError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._record_event(message)

    def _record_event(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params", {})
        self._events.append(message)
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            description = details.get("exception", {}).get("description") or details.get("text")
            self.exceptions.append(str(description))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = params.get("args", [])
            self.console_errors.append(" ".join(str(a.get("value", a)) for a in args))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.console_errors.append(f"{entry.get('source')}: {entry.get('text')}")

    def navigate(self, url: str, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'", timeout_s=timeout_s)

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression (promises are awaited)."""
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float) -> Any:
        """Poll an expression until it is truthy; return its value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            last = self.evaluate(expression)
            if last:
                return last
            time.sleep(POLL_INTERVAL_S)
        raise TimeoutError(f"{expression!r} still {last!r} after {timeout_s}s")

    def set_viewport(self, width: int, height: int, *, mobile: bool = False) -> None:
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=2 if mobile else 1,
            mobile=mobile,
        )

    def screenshot(self, path: Path) -> Path:
        """Save a PNG of the whole page (beyond the viewport when the page is longer)."""
        metrics = self.call("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        shot = self.call(
            "Page.captureScreenshot", format="png", captureBeyondViewport=True, clip=clip
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@dataclass
class Chromium:
    """A headless Chromium process with a fresh profile, on a DevTools port it picks itself."""

    binary: str
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = None
    _profile: tempfile.TemporaryDirectory[str] | None = None
    _port: int | None = None
    _pages: list[Page] = field(default_factory=list)

    def start(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="novikoff-chromium-")
        profile = Path(self._profile.name)
        log = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL  # noqa: SIM115
        self._proc = subprocess.Popen(
            [
                self.binary,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its renderers share the group, so stop() can end them all
        )
        self._port = self._wait_for_port(profile / "DevToolsActivePort")
        return self

    def _wait_for_port(self, port_file: Path) -> int:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._proc.returncode}")
            if port_file.exists():
                first_line = port_file.read_text().splitlines()[:1]
                if first_line and first_line[0].isdigit():
                    return int(first_line[0])
            time.sleep(POLL_INTERVAL_S)
        raise TimeoutError(f"chromium wrote no {port_file.name} in {STARTUP_TIMEOUT_S}s")

    def new_page(self) -> Page:
        """Open a fresh tab and connect to it."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self._port}/json/new?about:blank", method="PUT"
        )
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as response:
            target = json.load(response)
        page = Page(target["webSocketDebuggerUrl"]).connect()
        self._pages.append(page)
        return page

    def stop(self) -> None:
        for page in self._pages:
            page.close()
        self._pages.clear()
        if self._proc is not None:
            # The browser reaps its own renderers when asked to quit; the group kill is only for
            # stragglers of a browser that did not.
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._signal_group(signal.SIGKILL)
            self._proc = None
        if self._profile is not None:
            self._profile.cleanup()
            self._profile = None

    def _signal_group(self, signum: signal.Signals) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signum)

    def __enter__(self) -> Chromium:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
