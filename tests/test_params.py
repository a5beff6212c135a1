"""Cell values into typed parameter values: what spreadsheets really hold."""

from __future__ import annotations

import datetime as dt

import pytest

from templates.params import Param, Problem, coerce, normalize_header


def value(kind, raw, **spec):
    return coerce(Param("p", kind, **spec), raw)


def problem(kind, raw, **spec):
    with pytest.raises(Problem) as e:
        value(kind, raw, **spec)
    return e.value.code, e.value.details


@pytest.mark.parametrize("kind, raw, expected", [
    ("int", 42.0, 42), ("int", "42", 42), ("int", " 42.0 ", 42), ("int", "４２", 42),
    ("int", "1,000", 1000), ("float", "0.5", 0.5), ("float", 2, 2.0), ("float", "１.５", 1.5),
    ("bool", "是", True), ("bool", "否", False), ("bool", "Yes", True), ("bool", 0.0, False),
    ("bool", True, True), ("bool", "TRUE", True), ("bool", "1", True),
    ("seed", 4294967295.0, 4294967295), ("seed", "7", 7),
    ("text", 1001.0, "1001"), ("text", 3.25, "3.25"),
    ("text", 'say "hi"\n\\ {x} $y "}] 🎨', 'say "hi"\n\\ {x} $y "}] 🎨'),
    ("text", dt.date(2026, 12, 2), "2026-12-02"),
    ("size", "1024x768", [1024, 768]), ("size", "1024×768", [1024, 768]),
    ("size", "512 * 512", [512, 512]), ("size", 512.0, [512, 512]),
    ("size", "５１２Ｘ５１２", [512, 512]),
    ("color", "#FF8800", "#ff8800"), ("color", "red", "#ff0000"), ("color", "auto", "auto"),
    ("color", "#f80", "#ff8800"),
    ("image", " assets/a.png ", "assets/a.png"),
])
def test_values_people_type(kind, raw, expected):
    assert value(kind, raw) == expected


def test_choice_matches_case_and_width_insensitively():
    spec = {"choices": ("1:1", "4:5", "Bottom")}
    assert value("choice", "bottom", **spec) == "Bottom"
    assert value("choice", "１:１", **spec) == "1:1"
    assert problem("choice", "2:3", **spec) == ("not_choice", {"value": "2:3",
                                                               "choices": ("1:1", "4:5", "Bottom")})


@pytest.mark.parametrize("kind, raw, code", [
    ("int", "abc", "not_whole"), ("int", 42.5, "not_whole"), ("int", True, "not_whole"),
    ("float", "x", "not_number"), ("float", "nan", "not_number"), ("float", "inf", "not_number"),
    ("bool", "maybe", "not_bool"), ("seed", -1, "bad_seed"), ("seed", 2**32, "bad_seed"),
    ("color", "blurple", "not_color"), ("size", "big", "not_size"), ("size", "4x4", "not_size"),
    ("size", "9000x10", "not_size"),
])
def test_wrong_values_name_their_problem(kind, raw, code):
    assert problem(kind, raw)[0] == code


def test_ranges_and_blanks():
    assert problem("int", 500, min=1, max=100) == ("too_large", {"value": 500, "max": 100})
    assert problem("float", -1, min=0) == ("too_small", {"value": -1.0, "min": 0})
    assert value("int", "", default=7) == 7
    assert value("seed", None) is None  # drawn at submit time
    assert value("text", "   ", default="x") == "x"
    assert problem("text", "", required=True) == ("required", {})


def test_header_normalisation():
    assert normalize_header("  Ｐｒｏｍｐｔ ") == "prompt"
    assert normalize_header("提示词") == "提示词"
