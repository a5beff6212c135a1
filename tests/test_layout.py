"""The house rules that keep the layers apart: imports point bot -> executor -> storage,
and nothing on the chat side loads torch."""

from __future__ import annotations

import ast
import subprocess

import pytest

from tests.conftest import PYTHON, ROOT, python_env

HEAVY = {"torch", "diffusers", "transformers", "accelerate", "peft"}


def imported_top_modules(package: str) -> dict[str, set[str]]:
    """Module file -> top-level names it imports at module level or anywhere."""
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        names = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


@pytest.mark.parametrize("package, forbidden", [
    ("storage", {"bot", "executor"} | HEAVY),
    ("bot", HEAVY),
    ("executor", {"bot"}),
])
def test_imports_point_one_way(package, forbidden):
    bad = {path: sorted(names & forbidden)
           for path, names in imported_top_modules(package).items() if names & forbidden}
    assert bad == {}


def test_chat_side_starts_without_torch():
    # The notifier and `genbot run` use the pillow ops (contact sheets): no torch there.
    code = ("import sys, bot.cli, bot.service, bot.notifier, bot.run, storage.queue, "
            "executor.ops, executor.contact\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(HEAVY)!r}))")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=python_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
