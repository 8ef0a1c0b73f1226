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
