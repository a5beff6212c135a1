"""`genbot webhooks list|deliveries|test|redeliver|enable|secret`: the webhooks of this
machine's genbot, through the same admin actions as the API (bot.webhooks.service), as
the person at the keyboard. `test` and `redeliver` send at once, from here, and say how
the receiver answered; a running service sends everything else.

  genbot webhooks list                     endpoints, their events and deliveries by state
  genbot webhooks deliveries [--endpoint ID] [--status failed] [-n 20]
  genbot webhooks test ID                  send webhook.test to an endpoint now
  genbot webhooks redeliver DELIVERY       send a delivery again, with its webhook-id
  genbot webhooks enable ID                turn on an endpoint a 410 Gone turned off
  genbot webhooks secret                   a new whsec_ secret for a [[webhooks]] entry
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bot.app.permissions import Who
from bot.cli.shared import load_config, local_app

if TYPE_CHECKING:
    from bot.webhooks.service import WebhookService
    from storage.webhooks import Delivery


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    hooks = subparsers.add_parser("webhooks", help="webhook endpoints and their deliveries")
    actions = hooks.add_subparsers(dest="webhooks", required=True, metavar="ACTION")
    actions.add_parser("list", parents=[common], help="endpoints, their events and "
                       "deliveries by state").set_defaults(func=cmd_list)
    deliveries = actions.add_parser("deliveries", parents=[common],
                                    help="deliveries, newest first")
    deliveries.add_argument("--endpoint", metavar="ID")
    deliveries.add_argument("--status", choices=("pending", "sent", "failed"))
    deliveries.add_argument("-n", "--limit", type=int, default=20)
    deliveries.set_defaults(func=cmd_deliveries)
    test = actions.add_parser("test", parents=[common], help="send webhook.test now")
    test.add_argument("endpoint", metavar="ID")
    test.set_defaults(func=cmd_test)
    again = actions.add_parser("redeliver", parents=[common],
                               help="send a delivery again now, with its webhook-id")
    again.add_argument("delivery", type=int, metavar="DELIVERY")
    again.set_defaults(func=cmd_redeliver)
    enable = actions.add_parser("enable", parents=[common],
                                help="turn on an endpoint a 410 Gone turned off")
    enable.add_argument("endpoint", metavar="ID")
    enable.set_defaults(func=cmd_enable)
    actions.add_parser("secret", help="print a new whsec_ secret").set_defaults(
        func=cmd_secret)


HooksCommand = Callable[["WebhookService", Who, argparse.Namespace], Awaitable[int]]


def _command(func: HooksCommand) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        config = load_config(args)

        async def inner() -> int:
            from bot.webhooks.service import WebhookService
            async with local_app(config) as (app, who):
                return await func(WebhookService(app), who, args)

        return asyncio.run(inner())
    return run


def _when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "-"


def line(d: Delivery) -> str:
    m = d.message
    state = {"sent": f"sent (HTTP {m.platform_id})", "failed": "FAILED",
             "pending": f"pending, next try {_when(m.next_at)}"}.get(m.status, m.status)
    text = (f"{d.id:>6}  {d.endpoint:<15} {m.payload.get('type', ''):<15} {state}; "
            f"{m.attempts} {'try' if m.attempts == 1 else 'tries'}, {_when(d.updated_at)}")
    return text + (f"\n        last error: {m.error}" if m.error else "")


@_command
async def cmd_list(hooks: WebhookService, who: Who, args: argparse.Namespace) -> int:
    states = await hooks.endpoints_of(who)
    if not states:
        print("no webhook endpoints: add a [[webhooks]] table to the config, or submit with "
              "a callback URL (genbot docs webhooks)")
    for s in states:
        e = s.endpoint
        counts = ", ".join(f"{n} {state}" for state, n in sorted(s.counts.items())) or \
            "no deliveries yet"
        off = f"  DISABLED: {e.disabled_reason}" if e.disabled_at else ""
        print(f"{e.id:<15} {e.kind:<8} {e.url}{off}\n"
              f"                events: {', '.join(s.events)}; {counts}"
              + (f"\n                {e.description}" if e.description else ""))
    print(f"callbacks are signed with: {hooks.endpoints.callback_secret}")
    return 0


@_command
async def cmd_deliveries(hooks: WebhookService, who: Who, args: argparse.Namespace) -> int:
    rows = await hooks.deliveries(who, endpoint=args.endpoint, status=args.status,
                                  limit=max(1, args.limit))
    print("\n".join(line(d) for d in rows) or "no deliveries")
    return 0


def _said(d: Delivery) -> int:
    print(line(d))
    return 0 if d.message.status == "sent" else 1


@_command
async def cmd_test(hooks: WebhookService, who: Who, args: argparse.Namespace) -> int:
    return _said(await hooks.test(who, args.endpoint))


@_command
async def cmd_redeliver(hooks: WebhookService, who: Who, args: argparse.Namespace) -> int:
    return _said(await hooks.redeliver(who, args.delivery))


@_command
async def cmd_enable(hooks: WebhookService, who: Who, args: argparse.Namespace) -> int:
    turned = await hooks.enable(who, args.endpoint)
    print(f"{args.endpoint}: " + ("enabled; new events go to it again" if turned
                                  else "was enabled already"))
    return 0


def cmd_secret(args: argparse.Namespace) -> int:
    from bot.webhooks.endpoints import new_secret
    print(new_secret())
    return 0
