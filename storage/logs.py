"""Log lines for the service and the executor: plain text or one JSON object per line.

Structured fields passed as `extra=` (batch, job, node, seconds, ...) are kept: as
key=value after a plain line, as keys of the JSON object.
"""

from __future__ import annotations

import json
import logging

STANDARD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {"time": self.formatTime(record), "level": record.levelname.lower(),
                "logger": record.name, "message": record.getMessage()}
        data.update({k: v for k, v in vars(record).items() if k not in STANDARD_ATTRS})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRS}
        tb = extra.pop("traceback", None)
        line += "".join(f" {k}={v}" for k, v in extra.items())
        return f"{line}\n{tb}" if tb else line


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if root.level > logging.DEBUG:  # two lines per scheduled run: noise in an INFO log
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
