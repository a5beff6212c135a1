"""Log lines for the service and the executor: plain text or one JSON object per line.

Structured fields passed as `extra=` (batch, job, node, seconds, ...) are kept: as
key=value after a plain line, as keys of the JSON object.

A log line is one line, whatever its values hold: a field or a message may carry text
from outside (a ComfyUI server's error, a file name a hub listed, a chat message), and
a line break or a terminal escape in it must not forge another line or repaint the
terminal that tails the log. Plain lines show every control and invisible character
escaped (\\n, \\x1b, \\u202e); JSON escapes them as JSON does, C1 controls and line
separators included. A traceback keeps its own line breaks, below its line.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import unicodedata
from typing import Any

from storage.names import shown

STANDARD_ATTRS = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# json.dumps(ensure_ascii=False) escapes the C0 controls; of the rest, what a terminal or a
# line reader may act on (DEL and the C1 controls, invisible format marks, line and paragraph
# separators, lone surrogates) is escaped here too.
_NOT_ASCII = re.compile("[^\x00-\x7e]")
_ESCAPED = {"Cc", "Cf", "Cs", "Zl", "Zp"}


def escaped(text: object) -> str:
    """`text` as one line: every control and invisible character escaped."""
    return shown(str(text), sys.maxsize)


def escaped_lines(text: str) -> str:
    """A traceback: its own line breaks kept, every other control character escaped."""
    return "\n".join(escaped(line) for line in text.split("\n"))


def _json_escape(match: re.Match) -> str:
    ch = match.group()
    if unicodedata.category(ch) in _ESCAPED:
        code = ord(ch)
        if code > 0xFFFF:  # as a surrogate pair, as JSON writes it
            code -= 0x10000
            return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
        return f"\\u{code:04x}"
    return ch


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        data = {"time": self.formatTime(record), "level": record.levelname.lower(),
                "logger": record.name, "message": record.getMessage()}
        data.update({k: v for k, v in vars(record).items() if k not in STANDARD_ATTRS})
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        line = json.dumps(data, ensure_ascii=False, default=str)
        return _NOT_ASCII.sub(_json_escape, line)


class PlainFormatter(logging.Formatter):
    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        message = record.message
        record.message = escaped(message)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return escaped_lines(super().formatException(ei))

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extra = {k: v for k, v in vars(record).items() if k not in STANDARD_ATTRS}
        tb = extra.pop("traceback", None)
        line += "".join(f" {escaped(k)}={escaped(v)}" for k, v in extra.items())
        return f"{line}\n{escaped_lines(str(tb))}" if tb else line


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else
                         PlainFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    if root.level > logging.DEBUG:  # two lines per scheduled run: noise in an INFO log
        logging.getLogger("apscheduler").setLevel(logging.WARNING)


class Retrying:
    """A loop that retries what failed, told once per run of failures rather than once
    per try: the first failure logs a line (its traceback too, unless the database is
    merely unreachable: storage.db tells that outage once, for the whole process), the
    next ones go to debug, and the first success after them says the loop works again."""

    def __init__(self, log: logging.Logger, what: str):
        self.log, self.what, self.failing = log, what, False

    def failed(self, error: BaseException) -> None:
        from storage.db import connection_lost
        if self.failing:
            self.log.debug("%s failed again: %s", self.what, error)
        elif connection_lost(error):
            self.log.warning("%s failed: %s; trying again", self.what, error)
        else:
            self.log.error("%s failed; trying again", self.what, exc_info=error)
        self.failing = True

    def worked(self) -> None:
        if self.failing:
            self.log.info("%s works again", self.what)
            self.failing = False
