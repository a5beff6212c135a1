"""The command grammar: every command and form, every mistake with its usage line, in
English and Chinese; and any text at all gets a Command or a CommandError, nothing else."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.app.application import CancelTarget
from bot.app.permissions import Action, Role
from bot.app.values import start_time
from bot.chat.commands import COMMANDS
from bot.chat.grammar import Command, CommandError
from bot.messages import CATALOG
from storage.records import Priority
from templates.actions import ACTIONS

SHANGHAI = ZoneInfo("Asia/Shanghai")
NOW = datetime(2026, 12, 2, 20, 0, tzinfo=SHANGHAI)


SPECS = COMMANDS.specs


def p(text: str) -> Command:
    return COMMANDS.parse(text, now=NOW)


def error(text: str) -> CommandError:
    with pytest.raises(CommandError) as caught:
        p(text)
    return caught.value


GEN_DEFAULTS = {"priority": Priority.NORMAL, "skip_invalid": False, "dry_run": False, "at": None,
                "wait_for_executor": False, "vary": (), "seeds": 1, "grid": (), "channels": (),
                "layout": "", "yes": False, "compare": False}


@pytest.mark.parametrize("text", [
    "/gen product_main sheet.xlsx", "gen product_main sheet.xlsx",
    "@genbot gen product_main sheet.xlsx",
    "<@U024BE7LH> /gen product_main sheet.xlsx", "@机器人 生成 product_main sheet.xlsx",
    "／ｇｅｎ product_main sheet.xlsx", "  GEN   product_main   sheet.xlsx  ",
])
def test_gen_in_every_form(text):
    assert p(text) == Command("gen", {"template": "product_main", "file": "sheet.xlsx",
                                      "more": None}, GEN_DEFAULTS)


def test_gen_options_quotes_and_phone_dashes():
    cmd = p('/gen social_thumb "my sheet (v2).xlsx" —priority HIGH --skip-invalid --dry-run')
    assert cmd.args == {"template": "social_thumb", "file": "my sheet (v2).xlsx", "more": None}
    assert cmd.options == {**GEN_DEFAULTS, "priority": Priority.HIGH, "skip_invalid": True,
                           "dry_run": True}
    assert p("/gen social_thumb “我的 表格.xlsx” --priority=low").args["file"] == "我的 表格.xlsx"
    assert p("/gen social_thumb").args == {"template": "social_thumb", "file": None,
                                           "more": None}
    sweep = p("/gen product_main s.xlsx --vary steps=20,30 —vary=CFG=3..7:2 --seeds 4 --yes")
    assert (sweep.options["vary"], sweep.options["seeds"], sweep.options["yes"]) == \
        (("steps=20,30", "CFG=3..7:2"), 4, True)  # a repeated option keeps every value
    assert p("/gen product_main s.xlsx —channels taobao,DOUYIN").options["channels"] == \
        ("taobao", "DOUYIN")  # (as typed: the application reads the names)
    assert p("/gen product_main s.xlsx --channels jd —layout launch").options["layout"] == \
        "launch"
    at = p("/gen social_thumb s.csv --at 21:30").options["at"]
    assert at == datetime(2026, 12, 2, 21, 30, tzinfo=SHANGHAI)


@pytest.mark.parametrize("text, name, args, options", [
    ("/status", "status", {"batch": None}, {}),
    ("/status #12", "status", {"batch": 12}, {}),
    ("状态 12", "status", {"batch": 12}, {}),
    ("/queue", "queue", {}, {}),
    ("/cancel 12", "cancel", {"target": CancelTarget.batch(12)}, {}),
    ("/cancel job 7", "cancel", {"target": CancelTarget.job(7)}, {}),
    ("/cancel j7", "cancel", {"target": CancelTarget.job(7)}, {}),
    ("/cancel batch #3", "cancel", {"target": CancelTarget.batch(3)}, {}),
    ("/cancel mine", "cancel", {"target": CancelTarget.mine()}, {}),
    ("取消 全部", "cancel", {"target": CancelTarget.everything()}, {}),
    ("/retry 12", "retry", {"batch": 12}, {}),
    ("/pause", "pause", {}, {}),
    ("暂停", "pause", {}, {}),
    ("/resume", "resume", {}, {}),
    ("/templates", "templates", {}, {}),
    ("/template product_main", "template",
     {"name": "product_main", "target": None, "file": None}, {"replace": False}),
    ("/template import mine flow.png --replace", "template",
     {"name": "import", "target": "mine", "file": "flow.png"}, {"replace": True}),
    ("/grant U123 Admin", "grant", {"user": "U123", "role": Role.ADMIN}, {"priority": None}),
    ("/grant <@U123> viewer --priority High", "grant", {"user": "<@U123>", "role": Role.VIEWER},
     {"priority": Priority.HIGH}),
    ('/schedule "0 9 * * 1-5" social_thumb daily.csv', "schedule",
     {"cron": "0 9 * * 1-5", "template": "social_thumb", "file": "daily.csv"},
     {"priority": Priority.NORMAL, "vary": (), "seeds": 1}),
    ("/schedules", "schedules", {}, {}),
    ("/unschedule #4", "unschedule", {"id": 4}, {}),
    ("/revoke U123", "revoke", {"user": "U123"}, {}),
    ("/help", "help", {"command": None}, {}),
    ("/help /gen", "help", {"command": "gen"}, {}),
    ("帮助 取消", "help", {"command": "cancel"}, {}),
])
def test_every_command(text, name, args, options):
    assert p(text) == Command(name, args, options)


@pytest.mark.parametrize("text, code, en, zh", [
    ("", "empty_command", "Type a command", "请输入命令"),
    ("@genbot", "empty_command", "Type a command", "请输入命令"),
    ("/gne product_main", "unknown_command_close", 'unknown command "/gne" (did you mean /gen?)',
     "是否想输入 /gen"),
    ("/frobnicate", "unknown_command", 'unknown command "/frobnicate"; /help', "未知命令"),
    ("/gen", "missing_argument", "TEMPLATE is missing\nusage: /gen TEMPLATE [FILE]",
     "缺少 TEMPLATE\n用法：/gen TEMPLATE [FILE]"),
    ("/gen a b c d", "extra_argument", 'unexpected "d"\nusage: /gen', "多余的参数“d”"),
    ("/gen a --colour red", "unknown_option", "unknown option --colour\nusage: /gen", "未知选项"),
    ("/gen a --priority", "option_needs_value", "--priority needs a value", "需要一个值"),
    ("/gen a --priority asap", "bad_priority", '"asap" is not a priority', "不是优先级"),
    ('/gen a "b.xlsx', "unbalanced_quote", "A quote is not closed", "引号未闭合"),
    ("/status twelve", "not_an_id", '"twelve" is not a batch number\nusage: /status [BATCH]',
     "“twelve”不是有效的批次编号"),
    ("/cancel", "missing_argument",
     "TARGET is missing\nusage: /cancel BATCH | job JOB | mine | all", "缺少 TARGET"),
    ("/cancel job x", "not_an_id", '"x" is not a job number', "不是有效的任务编号"),
    ("/grant U1 boss", "bad_role", '"boss" is not a role', "不是角色"),
    ("/help frob", "unknown_command", 'unknown command "frob"', "未知命令"),
    ("/pause now", "extra_argument", 'unexpected "now"\nusage: /pause', "多余的参数"),
    ("/cancel 7 8", "extra_argument", 'unexpected "8"\nusage: /cancel', "多余的参数"),
    ('/schedule "every day" social_thumb', "bad_cron", '"every day" is not a cron line',
     "不是 cron"),
    ("/gen a --at 25:00", "bad_time", 'or +2h\nusage: /gen', "不是时间"),
])
def test_mistakes_get_a_specific_line_and_the_usage_in_both_languages(text, code, en, zh):
    e = error(text)
    assert e.code == code
    assert en in e.render("en") and zh in e.render("zh")


@pytest.mark.parametrize("raw, expected", [
    ("21:30", datetime(2026, 12, 2, 21, 30, tzinfo=SHANGHAI)),
    ("08:00", datetime(2026, 12, 3, 8, 0, tzinfo=SHANGHAI)),  # already past today: tomorrow
    ("2026-12-24 08:00", datetime(2026, 12, 24, 8, 0, tzinfo=SHANGHAI)),
    ("2026/12/24 08:00", datetime(2026, 12, 24, 8, 0, tzinfo=SHANGHAI)),
    ("2026-12-24T08:00:00+00:00", datetime(2026, 12, 24, 8, 0, tzinfo=ZoneInfo("UTC"))),
    ("+30m", NOW + timedelta(minutes=30)),
    ("+2h", NOW + timedelta(hours=2)),
    ("+1d", NOW + timedelta(days=1)),
])
def test_at_times(raw, expected):
    assert start_time(raw, NOW) == expected


@pytest.mark.parametrize("raw, code", [("25:00", "bad_time"), ("tomorrow-ish", "bad_time"),
                                       ("2026-12-01 08:00", "time_passed"), ("+0m", "time_passed"),
                                       ("+40d", "time_too_far")])
def test_bad_at_times(raw, code):
    assert error(f"/gen a --at {raw}").code == code


def test_help_lists_every_command_in_both_languages():
    for lang in ("en", "zh"):
        text = COMMANDS.help(lang=lang)
        assert all(f"/{name}" in text for name in SPECS)
    assert COMMANDS.help("gen", "zh").startswith("用法：/gen TEMPLATE [FILE]")
    assert all(f"help_{name}" in CATALOG for name in SPECS)


def test_each_command_is_declared_once_with_its_role_and_handler():
    """One registry: the grammar, the permission and the dispatch read the same entry."""
    assert set(SPECS) == {a.value for a in Action} | set(ACTIONS)  # image actions: specs
    assert SPECS["vary"].line == "/vary ROW|jJOB|bBATCH [N] [--strength 0.35] [--batch BATCH]"
    assert COMMANDS.names["放大"] == "upscale" and SPECS["again"].role is Role.SUBMITTER
    assert COMMANDS.names["生成"] == "gen" and COMMANDS.names["暂停"] == "pause"
    assert SPECS["pause"].role is Role.ADMIN and SPECS["gen"].role is Role.SUBMITTER
    assert SPECS["status"].role is Role.VIEWER and SPECS["help"].role is Role.NONE
    assert all(callable(s.handler) for s in SPECS.values())


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(), st.builds(lambda w, rest: f"/{w} {rest}",
                                      st.sampled_from(sorted(SPECS) + ["生成", "x"]), st.text())))
def test_any_text_gets_a_command_or_an_error_never_an_exception(text):
    try:
        command = p(text)
    except CommandError as e:
        for lang in ("en", "zh"):
            assert e.render(lang)
    else:
        assert command.name in SPECS
