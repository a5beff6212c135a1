"""`genbot chat [--as USER]`: the chat flow in a terminal, on the same core as Slack and DingTalk.

Type the commands you would type in chat; attach a file by giving its path, e.g.
`/gen social_thumb examples/social_thumb.xlsx` (the path becomes an upload named
social_thumb.xlsx, and image cells may name the files beside it). Replies, progress
and the paths of finished images are printed. Lines can come from a script on
standard input: at its end genbot waits for the batches it started and for every
message owed, then exits (1 if any job of those batches did not succeed).

Without --as you are your login name and an admin (the machine is yours); with
--as USER you are terminal:USER with the role the config and grants give, to try
what others may do.

Every `genbot` command imports this module to build its parser, so the chat core and
the application layer (and the HTTP client they bring) are imported in chat().
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import socket
import sys
import uuid
from typing import TYPE_CHECKING, TextIO

from bot.app.permissions import Who
from bot.cli.shared import GENBOT_ENGINE, add_executor_option, live_executors, load_config
from bot.messages import say
from bot.supervisor import Supervisor
from storage.config import Config, ServiceConfig
from storage.files import open_store
from storage.queue import open_queue
from storage.records import Status

if TYPE_CHECKING:
    from bot.chat.hub import ChatCore


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    chat = subparsers.add_parser("chat", parents=[common],
                                 help="type chat commands here; replies, progress and images "
                                      "printed")
    chat.add_argument("--as", dest="as_user", metavar="USER",
                      help="act as terminal:USER with that user's role (default: you, as admin)")
    whose = chat.add_mutually_exclusive_group()
    whose.add_argument("--no-executor", action="store_true",
                       help="a running `genbot serve` or `genbot worker` runs the jobs")
    add_executor_option(whose)
    chat.set_defaults(func=cmd_chat)


def cmd_chat(args: argparse.Namespace) -> int:
    from storage.logs import setup_logging
    config = load_config(args)
    setup_logging("warning", config[ServiceConfig].log_format)
    return asyncio.run(chat(config, args.as_user, executor=not args.no_executor,
                            own_executor=args.own_executor))


async def chat(config: Config, user: str | None = None, *, executor: bool = True,
               own_executor: bool = False, stdin: TextIO | None = None,
               stdout: TextIO | None = None) -> int:
    """`executor`: start one for the session, unless (without `own_executor`) one already
    runs on this database — then its jobs go to that one, as the banner's next line says."""
    from bot.app.application import App, load_templates
    from bot.chat.hub import ChatCore
    from bot.chat.platform import Incoming
    from bot.chat.terminal import CONVERSATION, NAME, Terminal, attach
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    me = user or getpass.getuser()
    queue = await open_queue(config)
    terminal = Terminal(stdout)
    app = App(config, queue, open_store(config), load_templates(config),
              local_admins=() if user else (f"{NAME}:{me}",))
    await app.record_versions(f"genbot chat on {socket.gethostname()}")
    core = ChatCore(app, [terminal])
    who = f"{NAME}:{me}"
    role = await app.role(Who(NAME, me, CONVERSATION))
    lang = core.chat.language(Incoming(NAME, me, CONVERSATION, ""))
    print(say("chat_banner", lang, who=who, role=role.value), file=stdout, flush=True)
    first = (await queue.latest_batch(who)) or 0
    supervisor = None
    log_file = config.data_dir / "logs" / "chat-executor.log"
    logs = contextlib.ExitStack()  # the executor's log file, closed as the session ends
    serving = [] if own_executor or not executor else \
        (await live_executors(queue)).get(GENBOT_ENGINE, [])
    if serving:
        print(say("executor_served", lang, executors=", ".join(serving)), file=stdout,
              flush=True)
    elif executor:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        supervisor = Supervisor(config, stderr=logs.enter_context(log_file.open("ab")))
        supervisor.start()
        app.executor_starting = True
    core.start()
    try:
        while True:
            line = await asyncio.to_thread(stdin.readline)
            if not line:
                break
            if not line.strip():
                continue
            text, files = attach(line.strip())
            await core.chat.receive(Incoming(NAME, me, CONVERSATION, text,
                                             message=uuid.uuid4().hex, files=files))
            await core.settle()
        return await _finish(core, who, first, supervisor, stdout)
    finally:
        await core.stop()
        if supervisor:
            await supervisor.stop()
        logs.close()
        await queue.close()


async def _finish(core: ChatCore, who: str, first: int, supervisor: Supervisor | None,
                  stdout: TextIO) -> int:
    """Wait for this session's batches and every owed message; 1 if a job did not succeed."""
    from bot.chat.terminal import NAME
    queue = core.queue
    if await queue.active_jobs_of(who):
        print("(waiting for your batches to finish; Ctrl-C leaves them queued)", file=stdout,
              flush=True)

    async def busy() -> bool:
        return bool(await queue.active_jobs_of(who)
                    or await core.outbox.cursor(core.notifier.cursor) < await queue.last_event_seq()
                    or await core.outbox.next_due(NAME) is not None)
    while await busy():
        if supervisor is not None and supervisor.gave_up:
            print("genbot: the executor could not start; see its log in data/logs/",
                  file=stdout, flush=True)
            return 1
        await asyncio.sleep(0.2)
    for batch in await queue.batches_of(who, after=first):
        if any(j.status != Status.SUCCEEDED for j in await queue.batch_jobs(batch)):
            return 1
    return 0
