"""Rules for the test suite itself: a test module imports no other test module (what tests
share lives in tests/fakes/ or tests/conftest.py), and neither do the bench scripts."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

# A module of tests: tests/test_*.py (what pytest collects), however it is named in an import.
TEST_MODULE = re.compile(r"(^|\.)test_\w+$")


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every module `path` imports, at module level or in a function;
    relative imports resolved against the package `path` is in; `from tests import test_x`
    named as tests.test_x; `python -c` code in string constants parsed too."""
    package = ".".join(path.relative_to(ROOT).parent.parts)
    found: list[tuple[int, str]] = []

    def scan(tree: ast.AST, line: int | None = None) -> None:
        for node in ast.walk(tree):
            at = line or getattr(node, "lineno", 0)
            if isinstance(node, ast.Import):
                found.extend((at, alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(p for p in [*parts, base] if p)
                found.append((at, base))
                found.extend((at, f"{base}.{alias.name}") for alias in node.names)
            elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
                  and "import" in node.value):
                try:  # code handed to a child interpreter (python -c "...")
                    scan(ast.parse(node.value), at)
                except SyntaxError:
                    pass

    scan(ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def cross_imports(paths: list[Path]) -> list[str]:
    bad = []
    for path in paths:
        own = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for line, name in imported_modules(path):
            if TEST_MODULE.search(name) and name != own:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(bad))


def suite_files() -> list[Path]:
    return sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "bench").rglob("*.py")])


def test_no_test_module_imports_another_test_module():
    """A helper two test files share is moved to tests/fakes/, not imported from the test
    module that first had it: importing a test module runs its collection-time code and
    ties one file's tests to another's."""
    assert cross_imports(suite_files()) == []


def test_the_rule_sees_each_way_of_importing_a_test_module(tmp_path, monkeypatch):
    """The check above is not vacuous: each spelling of such an import is caught."""
    import tests.test_suite_rules as rules
    monkeypatch.setattr(rules, "ROOT", tmp_path)
    (tmp_path / "tests" / "fakes").mkdir(parents=True)
    # Written with {t} for "test_", so that this file's own strings import nothing.
    spellings = {
        "a.py": "from tests.{t}slack import SlackWorld\n",
        "b.py": "import tests.{t}api\n",
        "c.py": "from tests import {t}cli\n",
        "d.py": "def f():\n    from .{t}worker import example_jobs\n",
        "e.py": 'CODE = "import sys; from tests.{t}x import f; f()"\n',
        "fakes/f.py": "from ..{t}dingtalk import DingWorld\n",
        "test_self.py": "CODE = 'from tests.{t}self import helper'\n",  # its own module: fine
    }
    for name, text in spellings.items():
        (tmp_path / "tests" / name).write_text(text.format(t="test_"))
    (tmp_path / "tests" / "ok.py").write_text(
        "from tests.fakes.slack import SlackWorld\nfrom tests.conftest import ROOT\n"
        "import pytest\nTEXT = 'the test_slack module, and nothing imported'\n")
    found = cross_imports(sorted((tmp_path / "tests").rglob("*.py")))
    assert [f.split(":")[0] for f in found] == [
        "tests/a.py", "tests/b.py", "tests/c.py", "tests/d.py", "tests/e.py", "tests/fakes/f.py"]
