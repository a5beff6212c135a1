"""Log lines carry their structured fields, as text or as JSON."""

from __future__ import annotations

import json
import logging

from storage.logs import JsonFormatter, PlainFormatter


def record(**extra) -> logging.LogRecord:
    rec = logging.makeLogRecord({"name": "genbot.executor", "levelno": logging.INFO,
                                 "levelname": "INFO", "msg": "node end %s", "args": ("x",)})
    rec.__dict__.update(extra)
    return rec


def test_plain_lines_end_with_key_value_fields_and_the_traceback_below():
    line = PlainFormatter("%(levelname)s %(message)s").format(
        record(batch=3, job=7, seconds=0.5, traceback="Traceback ...\nValueError"))
    assert line == "INFO node end x batch=3 job=7 seconds=0.5\nTraceback ...\nValueError"


def test_json_lines_are_one_object_with_the_fields():
    data = json.loads(JsonFormatter().format(record(batch=3, node="gen", 标签="中文")))
    assert data["message"] == "node end x" and data["level"] == "info"
    assert (data["batch"], data["node"], data["标签"]) == (3, "gen", "中文")


def test_the_scheduler_says_nothing_at_info_but_everything_at_debug():
    import logging

    from storage.logs import setup_logging
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        setup_logging("info", "plain")
        assert not logging.getLogger("apscheduler.scheduler").isEnabledFor(logging.INFO)
        assert logging.getLogger("genbot.service").isEnabledFor(logging.INFO)
        logging.getLogger("apscheduler").setLevel(logging.NOTSET)
        setup_logging("debug", "plain")
        assert logging.getLogger("apscheduler.scheduler").isEnabledFor(logging.DEBUG)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        logging.getLogger("apscheduler").setLevel(logging.NOTSET)
