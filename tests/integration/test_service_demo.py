"""``novikoff demo`` (what ``make run`` runs): broker, service and producer, stopped by SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.broker import free_port

pytestmark = pytest.mark.integration

START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0


def wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text(errors="replace")
        try:
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} not ready:\n{log.read_text(errors='replace')}")


def test_demo_learns_and_stops_cleanly(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "demo.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOVIKOFF_")}
    env.pop("KAFKA_BOOTSTRAP_SERVERS", None)  # the demo's own embedded broker
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "service", "demo", "--port", str(port), "--rate", "1000"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(base + "/readyz", proc, log)
        deadline = time.monotonic() + START_TIMEOUT_S
        stats = httpx.get(base + "/stats").json()
        while stats["seen"] < 500 and time.monotonic() < deadline:
            time.sleep(0.2)
            stats = httpx.get(base + "/stats").json()
        assert stats["seen"] >= 500, log.read_text(errors="replace")
        bound = stats["bounds"][0]
        assert bound["name"] == "synthetic"
        assert stats["mistakes"] <= bound["bound"]
        assert httpx.get(base + "/").status_code == 200
        assert f"dashboard   {base}/" in log.read_text()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STOP_TIMEOUT_S) == 0, log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
