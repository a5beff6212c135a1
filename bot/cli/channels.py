"""`genbot channels`: the sales channels and layouts this config offers, as `--channels` and
`--layout` take them (the presets, the team's own file, the assets folder's layouts), with
what each channel's files are and what each layout reads from a sheet."""

from __future__ import annotations

import argparse

from bot.cli.shared import add_lang_option, load_config
from bot.messages import say
from templates import layouts
from templates.channels import ChannelError, catalogue
from templates.settings import DeliverConfig, assets_folder


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    channels = subparsers.add_parser(
        "channels", parents=[common], help="list the sales channels (--channels) and layouts "
                                           "(--layout): each channel's files, each layout's "
                                           "columns")
    add_lang_option(channels)
    channels.set_defaults(func=cmd_channels)


def cmd_channels(args: argparse.Namespace) -> int:
    config = load_config(args)
    lang, settings = args.lang, config[DeliverConfig]
    zh = lang.startswith("zh")
    try:
        known = catalogue(settings.channels)
    except ChannelError as e:
        print(say("channel_file_broken", lang, error=str(e)))
        return 1
    for ch in known.values():
        label = "label_off" if ch.name in settings.unlabelled else f"label_{ch.label}"
        print(say("cli_channel", lang, name=ch.name, title=ch.title_zh if zh else ch.title,
                  label=say(label, lang)))
        for r in ch.renditions:
            print(say("cli_rendition", lang, name=r.name, width=r.size[0], height=r.size[1],
                      fit=r.fit, format=r.format, file=r.file))
    folder = assets_folder(config)
    for name in layouts.catalogue(folder):
        try:
            found = layouts.chosen(name, folder)
        except layouts.LayoutError as e:
            print(say("cli_layout_broken", lang, name=name, error=str(e)))
            continue
        print(say("cli_layout", lang, name=name, title=found.title_zh if zh else found.title,
                  aspects=", ".join(found.aspects), locales=", ".join(found.locales),
                  columns=", ".join(layouts.layout_columns(found))))
    return 0
