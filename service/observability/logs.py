"""Process-wide logging: plain lines for people or JSON lines for log pipelines.

One line per notable event (start, stop, checkpoint, rebalance, dead letter, outage); the service
never logs per normal event or per request.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, ClassVar

import orjson

from service.settings import LoggingSettings

logger = logging.getLogger(__name__)

PLAIN_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
NOISY_LIBRARIES = ("kafka", "uvicorn.access")
# During a broker outage kafka-python repeats the same error (with a traceback) on every
# reconnect attempt; the runner already reports "lost" and "connected" once each.
LIBRARY_REPEAT_WINDOW_S = 60.0
REPORTED_BY_THE_RUNNER = frozenset(
    {
        ("kafka.cluster", "Topic %s not found in cluster metadata"),
        ("kafka.cluster", "Topic %s is not authorized for this client"),
        ("kafka.coordinator.assignors.range", "No partition metadata for topic %s"),
    }
)
"""kafka-python records (logger, template) of causes the consumer runner reports itself, once
per cause and with the fix (see ``consumers.faults``): they are dropped, not repeated."""


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    _STANDARD: ClassVar[frozenset[str]] = frozenset(
        logging.LogRecord("", 0, "", 0, "", (), None).__dict__
    ) | {"message", "asctime", "color_message", "taskName"}

    def format(self, record: logging.LogRecord) -> str:
        """Serialise ``record`` as a JSON line."""
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in self._STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, default=str).decode()


class LibraryRepeatFilter(logging.Filter):
    """Let one kafka-python record per message template through per window, without traceback.

    The first record of a kind keeps its level and text, so a real library error still shows;
    its repeats inside the window are dropped instead of flooding the log during an outage.
    Records in :data:`REPORTED_BY_THE_RUNNER` are always dropped. novikoff's own records always
    pass.
    """

    def __init__(self, window_s: float = LIBRARY_REPEAT_WINDOW_S) -> None:
        super().__init__()
        self._window_s = window_s
        self._last_seen: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Drop a kafka-python record whose kind was let through less than a window ago."""
        if record.name != "kafka" and not record.name.startswith("kafka."):
            return True
        key = (record.name, record.msg)
        if key in REPORTED_BY_THE_RUNNER:
            return False
        now = time.monotonic()
        last = self._last_seen.get(key)
        if last is not None and now - last < self._window_s:
            return False
        self._last_seen[key] = now
        if record.exc_info:
            record.msg = f"{record.getMessage()} ({record.exc_info[1]!r})"
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True


def configure_logging(settings: LoggingSettings) -> None:
    """Send every log line to stderr at ``settings.level``, as JSON when ``settings.json``."""
    handler = logging.StreamHandler(sys.stderr)
    if settings.json_lines:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(PLAIN_FORMAT))
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
    root.addHandler(handler)
    root.setLevel(settings.level)
    # kafka-python logs every connection attempt at INFO; outages are reported by the runner.
    for name in NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))
    handler.addFilter(LibraryRepeatFilter())
