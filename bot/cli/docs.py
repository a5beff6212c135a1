"""`genbot docs [TOPIC]`: the documentation that ships inside the package, printed.

Whoever installed the wheel has no checkout, so no docs/ folder and no README: what
genbot's messages point them at must come with genbot. bot/docs is the repository's
docs/ folder (a link), packaged as data, so the checkout and the wheel print the same.
"""

from __future__ import annotations

import argparse
import difflib
from importlib.resources import files
from importlib.resources.abc import Traversable


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    docs = subparsers.add_parser("docs", help="print a topic of the documentation that ships "
                                              "with genbot; without one, list the topics")
    docs.add_argument("topic", nargs="?", help="e.g. models, operations, api (default: list)")
    docs.set_defaults(func=cmd_docs)


def topics() -> dict[str, Traversable]:
    """Topic name ("models") -> its shipped page (bot/docs/models.md), by name."""
    pages = [p for p in (files("bot") / "docs").iterdir() if p.name.endswith(".md")]
    return {p.name.removesuffix(".md"): p for p in sorted(pages, key=lambda p: p.name)}


def title(page: Traversable) -> str:
    """A page's first heading: what the topic is about."""
    with page.open(encoding="utf-8") as text:
        return text.readline().lstrip("# ").strip()


def cmd_docs(args: argparse.Namespace) -> int:
    pages = topics()
    if args.topic is None:
        for name, page in pages.items():
            print(f"{name:14} {title(page)}")
        print("\ngenbot docs TOPIC prints one (genbot docs models | less)")
        return 0
    found = pages.get(args.topic.lower().removesuffix(".md"))
    if found is None:
        close = difflib.get_close_matches(args.topic, list(pages), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise SystemExit(f"genbot: no docs topic {args.topic!r}{hint}; topics: "
                         f"{', '.join(pages)}")
    print(found.read_text(encoding="utf-8"), end="")
    return 0
