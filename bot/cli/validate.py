"""`genbot validate TEMPLATE SHEET`: the bot's report on a sheet, without queueing anything."""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from bot.cli.shared import add_lang_option, load_config
from bot.cli.templates import find_template
from bot.settings import IntakeConfig

if TYPE_CHECKING:
    from bot.intake.check import IntakeReport


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    validate = subparsers.add_parser("validate", parents=[common],
                                     help="check a sheet against a template; queues nothing")
    validate.add_argument("template")
    validate.add_argument("sheet")
    add_lang_option(validate)
    validate.add_argument("--skip-invalid", action="store_true",
                          help="report as the bot would with --skip-invalid")
    validate.set_defaults(func=cmd_validate)


def cmd_validate(args: argparse.Namespace) -> int:
    from bot.intake.check import SheetFile, check_sheet
    from bot.intake.images import folder_attachments
    from storage.files import FileStore
    config = load_config(args)
    t = find_template(config, args.template)
    sheet = Path(args.sheet)
    try:
        data = sheet.read_bytes()
    except OSError as e:
        raise SystemExit(f"genbot: cannot read {sheet}: {e.strerror or e}") from None

    async def run() -> IntakeReport:
        with tempfile.TemporaryDirectory() as tmp:  # validating stores nothing
            return await check_sheet(t, SheetFile(sheet.name, data), config=config,
                                     store=FileStore(Path(tmp)),
                                     attachments=folder_attachments(sheet.resolve().parent),
                                     skip_invalid=args.skip_invalid)

    result = asyncio.run(run())
    print(result.report(args.lang, config[IntakeConfig].max_problems_shown, args.skip_invalid))
    return 0 if result.ok else 1
