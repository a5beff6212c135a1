"""The house rules that keep the layers apart: imports point bot -> templates -> storage and
executor -> templates -> storage (the bot never imports the executor: its commands reach
`genbot` by entry point), and nothing on the chat side loads torch."""

from __future__ import annotations

import ast
import re
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
    ("storage", {"bot", "executor", "templates"} | HEAVY),
    ("templates", {"bot", "executor"} | HEAVY),
    ("bot", {"executor"} | HEAVY),
    ("executor", {"bot"}),
])
def test_imports_point_one_way(package, forbidden):
    bad = {path: sorted(names & forbidden)
           for path, names in imported_top_modules(package).items() if names & forbidden}
    assert bad == {}


def test_chat_side_starts_without_torch():
    # The service, the notifier and `genbot run` draw contact sheets (bot.app.contact) and
    # read templates with pillow alone; `genbot --help` loads the executor's commands
    # (executor.cli) and the pillow ops check their signatures: no torch in any of them.
    chat_side = ["bot.cli", "bot.service", "bot.chat.notifier", "bot.cli.run", "bot.app.contact",
                 "storage.queue", *sorted(f"templates.{p.stem}" for p in
                                          (ROOT / "templates").glob("*.py")
                                          if p.stem != "__init__")]
    code = (f"import sys, {', '.join(chat_side)}, executor.cli, executor.diffusers.ops\n"
            "from bot.cli.genbot import build_parser\n"
            "build_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{sorted(HEAVY)!r}))")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=python_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_templates_and_the_chat_side_import_with_torch_blocked():
    """With torch (and diffusers) unimportable, the template domain loads, checks and binds
    every shipped template, and the service's modules import."""
    code = ("import sys\n"
            "for name in ('torch', 'diffusers', 'transformers'): sys.modules[name] = None\n"
            "from templates.loader import load_templates, shipped_dir\n"
            "from templates.binding import bind\n"
            "import templates.settings, templates.jobs, templates.fonts, bot.service\n"
            "found, broken = load_templates(shipped_dir())\n"
            "assert not broken and sorted(found) == ['edit_instruction', 'material_swap', "
            "'poster_zh', 'product_main', 'social_thumb'], (found, broken)\n"
            "print('ok')")
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True,
                          env=python_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_executors_commands_come_by_entry_point_not_by_import():
    """`genbot --help` lists `worker` and `models`, yet bot/cli names no executor module:
    pyproject's `genbot.commands` entry point brings them (bot.cli.plugins)."""
    done = subprocess.run([PYTHON, "-m", "bot.cli", "--help"], capture_output=True, text=True,
                          env=python_env(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("    ")}
    assert {"worker", "models", "serve", "templates"} <= listed
    assert "leaving out" not in done.stderr
    assert {path for path, names in imported_top_modules("bot/cli").items()
            if "executor" in names} == set()


# --- no import cycles, one application layer, a bot/ that shows its parts --------------------

PRODUCT = ("bot", "executor", "storage", "templates")


def module_graph() -> dict[str, set[str]]:
    """Product module -> the product modules it imports, anywhere in it (lazy imports too)."""
    modules = {}
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                targets = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def test_no_import_cycle_among_product_modules():
    graph = module_graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(module):]
                                                                + [module]))
        if module in done:
            return
        for imported in sorted(graph[module]):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


def test_bots_parts_depend_one_way():
    """app below the fronts; intake below app; no front imports another front."""
    graph = module_graph()

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])
    edges = {(part(a), part(b)) for a, targets in graph.items() for b in targets
             if a.startswith("bot.") and b.startswith("bot.") and part(a) != part(b)}
    assert not {e for e in edges if e[0] in ("bot.app", "bot.intake", "bot.errors",
                                              "bot.messages", "bot.conventions", "bot.outbound")
                and e[1] in ("bot.chat", "bot.web", "bot.cli", "bot.service", "bot.scheduler",
                             "bot.webhooks")}
    assert not {e for e in edges if e[0] == "bot.webhooks"  # a front for other systems
                and e[1] in ("bot.chat", "bot.web", "bot.cli", "bot.service")}
    assert ("bot.web", "bot.chat") not in edges and ("bot.chat", "bot.web") not in edges
    assert ("bot.intake", "bot.app") not in edges


def test_bot_shows_its_parts():
    top = sorted(p.name for p in (ROOT / "bot").iterdir()
                 if p.name != "__pycache__" and not p.name.startswith("."))
    assert top == ["__init__.py", "app", "chat", "cli", "client.py", "conventions.py", "docs",
                   "errors.py", "i18n.py", "intake", "locales", "messages.py", "outbound.py",
                   "scheduler.py", "service.py", "settings.py", "supervisor.py", "web",
                   "webhooks"]
    assert str((ROOT / "bot" / "docs").readlink()) == "../docs"  # one copy: what ships


def test_the_queue_is_fed_by_the_application_layer_only():
    callers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bot").rglob("*.py")
                     if ".enqueue(" in p.read_text(encoding="utf-8"))
    assert callers == ["bot/app/application.py"]


def test_one_source_for_the_version():
    from importlib.metadata import version

    from executor import VERSION
    assert version("genbot") == VERSION
    hard_coded = [str(p.relative_to(ROOT)) for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py")
                  if re.search(r'VERSION\s*=\s*"\d+\.\d', p.read_text(encoding="utf-8"))]
    assert hard_coded == []


def test_ci_runs_exactly_the_readme_test_command_with_the_static_checks():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv")]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert commands[1] in ci
    assert "ruff check ." in commands[1] and "&& .venv/bin/mypy &&" in commands[1]
    # Trying genbot installs what running needs, not the test tools (moto, a browser …).
    assert "pip install -e . " in commands[0] and "[dev]" not in commands[0]
    assert commands[0].endswith("&& .venv/bin/genbot serve")


def test_each_layer_reads_config_sections_by_their_class():
    """`config[QueueConfig]` (typed, the section's owner named) in product code, never the
    untyped `config.queue` that tests may use; and storage declares only its own
    sections."""
    from storage import config as cfg
    names = "|".join([*cfg.sections(), *cfg.tables()])
    untyped = re.compile(rf"\bconfig\.({names})\b")
    found = sorted(f"{p.relative_to(ROOT)}:{n + 1}" for pkg in PRODUCT
                   for p in (ROOT / pkg).rglob("*.py")
                   for n, line in enumerate(p.read_text(encoding="utf-8").splitlines())
                   if untyped.search(line) and not line.lstrip().startswith("#"))
    assert found == []
    owners = {name: cls.__module__ for name, cls in {**cfg.sections(), **cfg.tables()}.items()}
    assert {n for n, m in owners.items() if m == "storage.config"} == \
        {"service", "database", "queue", "storage"}
    assert set(owners.values()) == {"storage.config", "templates.settings", "executor.settings",
                                    "bot.settings"}
