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
"""

from __future__ import annotations

import asyncio
import getpass
import shlex
import sys
import uuid
from pathlib import Path
from typing import TextIO

from bot.permissions import Who
from bot.platform import DownloadError, FileRef, Incoming, Outgoing, Platform
from storage.config import Config

NAME = "terminal"
CONVERSATION = "terminal"


class Terminal(Platform):
    """Posts are printed; a progress message is printed again when it changes."""

    name = NAME
    can_edit = True

    def __init__(self, out: TextIO | None = None):
        self.out = out or sys.stdout
        self.count = 0

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def send(self, out: Outgoing) -> str:
        self.count += 1
        if out.file is not None:
            label = "image" if out.image else "file"
            self._print(f"{label}: {out.file}" + (f"  {out.text}" if out.text else ""))
        else:
            self._print(out.text)
        return str(self.count)

    async def edit(self, message_id: str, out: Outgoing) -> None:
        self._print(out.text)

    async def download(self, handle: dict) -> bytes:
        try:
            return await asyncio.to_thread(Path(handle["path"]).read_bytes)
        except OSError as e:
            raise DownloadError("download_failed", reason=e.strerror or str(e)) from None


def attach(text: str) -> tuple[str, tuple[FileRef, ...]]:
    """Arguments that are paths of files become uploads named by their file name."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        return text, ()  # the grammar explains the quote
    files = []
    for i, token in enumerate(tokens[1:], start=1):
        path = Path(token).expanduser()
        if not token.startswith("-") and path.is_file():
            path = path.resolve()
            files.append(FileRef(path.name, path.stat().st_size,
                                 {"path": str(path), "folder": str(path.parent)}))
            tokens[i] = path.name
    return (shlex.join(tokens) if files else text), tuple(files)


async def chat(config: Config, user: str | None = None, *, executor: bool = True,
               stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    from bot.core import ChatCore
    from bot.service import load_checked_templates
    from bot.supervisor import Supervisor
    from storage.queue import open_queue
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    me = user or getpass.getuser()
    queue = await open_queue(config)
    terminal = Terminal(stdout)
    core = ChatCore(config, queue, [terminal], templates=load_checked_templates(config),
                    local_admins=() if user else (f"{NAME}:{me}",))
    who = f"{NAME}:{me}"
    role = await core.chat.permissions.role(Who(NAME, me, CONVERSATION))
    print(f"genbot chat as {who} ({role}). /help lists the commands; attach a file by its "
          f"path: /gen social_thumb examples/social_thumb.xlsx. Ctrl-D ends.",
          file=stdout, flush=True)
    first = (await queue.latest_batch(who)) or 0
    supervisor = None
    log_file = config.data_dir / "logs" / "chat-executor.log"
    log = None
    if executor:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        log = open(log_file, "ab")
        supervisor = Supervisor(config, stderr=log)
        supervisor.start()
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
        if log:
            log.close()
        await queue.close()


async def _finish(core, who: str, first: int, supervisor, stdout: TextIO) -> int:
    """Wait for this session's batches and every owed message; 1 if a job did not succeed."""
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
        if any(j["status"] != "succeeded" for j in await queue.batch_jobs(batch)):
            return 1
    return 0
