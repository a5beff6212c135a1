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


FORGED = "bad input\n2030-01-01 00:00:00 INFO genbot.executor: job done\r\x1b[2J\x00\x9b31m\u2028"


def test_plain_lines_stay_one_line_whatever_a_message_or_a_field_holds():
    rec = record(error=FORGED, server="http://a\u202e", traceback="Traceback ...\n\x1b[2Jboom")
    rec.msg, rec.args = "ComfyUI said %s", (FORGED,)
    line, tb = PlainFormatter("%(levelname)s %(message)s").format(rec).split("\n", 1)
    shown = ("bad input\\n2030-01-01 00:00:00 INFO genbot.executor: job done\\r\\x1b[2J\\x00"
             "\\x9b31m\\u2028")
    assert line == f"INFO ComfyUI said {shown} error={shown} server=http://a\\u202e"
    assert tb == "Traceback ...\n\\x1b[2Jboom"  # its own line breaks kept, escapes shown


def test_an_exceptions_text_cannot_repaint_the_terminal():
    try:
        raise ValueError("x\x1b[2J")
    except ValueError:
        import sys
        rec = record()
        rec.exc_info = sys.exc_info()
    text = PlainFormatter("%(message)s").format(rec)
    assert "\x1b" not in text and text.endswith("ValueError: x\\x1b[2J")


def test_json_lines_escape_what_a_terminal_or_a_line_reader_acts_on_and_read_back_the_same():
    line = JsonFormatter().format(record(error=FORGED, 标签="中文 é"))
    assert "\n" not in line and "\r" not in line
    assert not any(ch in line for ch in "\x1b\x00\x9b\u2028\u2029\x85")
    data = json.loads(line)
    assert data["error"] == FORGED and data["标签"] == "中文 é"  # the values, exactly


def test_a_retrying_loop_tells_a_run_of_failures_once(caplog):
    from storage.logs import Retrying
    log = logging.getLogger("genbot.test.retrying")
    retrying = Retrying(log, "sender slack: reading the outbox")
    with caplog.at_level(logging.DEBUG, logger="genbot.test.retrying"):
        for _ in range(5):  # the database away: one warning, no traceback
            retrying.failed(ConnectionRefusedError("connect call failed"))
        retrying.worked()
        retrying.worked()
        try:
            raise KeyError("a bug")
        except KeyError as e:  # anything else: its traceback, once
            retrying.failed(e)
            retrying.failed(e)
    told = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert told == [
        ("WARNING", "sender slack: reading the outbox failed: connect call failed; trying "
                    "again", False),
        *[("DEBUG", "sender slack: reading the outbox failed again: connect call failed",
           False)] * 4,
        ("INFO", "sender slack: reading the outbox works again", False),
        ("ERROR", "sender slack: reading the outbox failed; trying again", True),
        ("DEBUG", "sender slack: reading the outbox failed again: 'a bug'", False)]
