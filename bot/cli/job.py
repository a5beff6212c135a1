"""`genbot job ACTION|keep|reject|unkeep|lineage ID`: act on a finished image of a running
genbot, over the REST API (as `genbot submit` does, with its token and exit codes:
bot.cli.client). The actions are templates.actions.ACTIONS, each a subcommand taking
what its spec takes:

  genbot job again 12 -n 3               the same row with new seeds, three times
  genbot job vary 12 -n 2 --strength 0.5 close variations of the image
  genbot job upscale 12 --factor 4       the image four times larger
  genbot job edit 12 prompt="a red jar" steps=30
  genbot job edit 12 -i "把背景换成海滩"         the image itself changed by a sentence
  genbot job repaint 12 --mask mask.png -i "a red scarf"
  genbot job repaint 12 --region "the bottle" -i "a gold bottle"
  genbot job extend 12 --aspect 9:16     the canvas grown, the image kept exactly
  genbot job keep 12  /  reject 12  /  unkeep 12
  genbot job lineage 12                  what it was made from, and what from it

An action prints its new batch and job ids: `batch 7: again of job 12 -> jobs 31, 32, 33`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.app.application import MOVES
from bot.cli.client import (
    TOKEN_EXIT,
    add_server_options,
    answer,
    error,
    server_of,
    token_for,
    unreachable,
)
from bot.messages import say
from storage.reviews import MAX_STARS, Review
from templates.actions import ACTIONS, SIDES

if TYPE_CHECKING:
    import aiohttp

RATINGS = {"keep": "keep", "reject": "reject", "unkeep": None}
SHOWN = {"kept": "kept", "rejected": "rejected", None: "not rated"}
TAKES: dict[str, Callable[[argparse.ArgumentParser], Any]] = {  # what an action takes
    "count": lambda p: p.add_argument("-n", "--count", type=int, default=1,
                                      help="how many new images (default 1)"),
    "strength": lambda p: p.add_argument(
        "--strength", type=float, metavar="S",
        help="0 to 1: how far from the image (default: the template's, else 0.35)"),
    "factor": lambda p: p.add_argument("--factor", type=float, default=2.0, metavar="F",
                                       help="how many times larger (default 2)"),
    "values": lambda p: p.add_argument(
        "values", nargs="*", metavar="KEY=VALUE", type=key_value,
        help="a column or parameter and its new value, read as a sheet's cell"),
    "instruction": lambda p: (
        p.add_argument("-i", "--instruction", metavar="TEXT", default="",
                       help="edit: instead of values, a sentence the image itself is changed "
                       "by on an edit model (\"把背景换成海滩\"); repaint, extend: what to "
                       "paint (default: the image's own prompt)"),
        p.add_argument("--model", help="the model ([models] name; default: [templates] "
                       "edit_model or fill_model, else the image's own or the first that can)")),
    "mask": lambda p: p.add_argument(
        "--mask", metavar="FILE", type=argparse.FileType("rb"),
        help="a picture of the image's proportions: white where to repaint, black where to "
        "keep (this, --region or both)"),
    "region": lambda p: p.add_argument(
        "--region", metavar="WORDS", default="",
        help="where to repaint, in words (\"the bottle\", \"瓶子\"): [templates] "
        "segmentation_model finds it"),
    "margins": lambda p: (
        p.add_argument("--aspect", metavar="W:H",
                       help="grow the canvas to this shape around the image (9:16)"),
        *(p.add_argument(f"--{side}", type=int, default=0, metavar="PX",
                         help=f"px added on the {side}") for side in SIDES)),
}


def register(subparsers: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    job = subparsers.add_parser("job", help="act on a finished image over the API: "
                                + ", ".join([*ACTIONS, "keep", "lineage", "review", "signoff",
                                             "move"]))
    actions = job.add_subparsers(dest="job", required=True, metavar="ACTION")

    def sub(name: str, help_: str, ident: Callable[[str], Any] = int, metavar: str = "ID",
            about: str = "the job whose image it is") -> argparse.ArgumentParser:
        parser = actions.add_parser(name, help=help_)
        parser.add_argument("id", type=ident, metavar=metavar, help=about)
        add_server_options(parser)
        return parser

    def acting(name: str, help_: str) -> argparse.ArgumentParser:
        parser = sub(name, help_, job_or_batch, "ID|bBATCH", "the job whose image it is, or "
                     "bBATCH: every kept image of that batch (and of all made from its images)")
        parser.add_argument("--wait-for-executor", action="store_true",
                            help="queue it even when no running executor can run its jobs")
        parser.add_argument("--idempotency-key", metavar="KEY",
                            help="the same key again returns the first batch (safe retries)")
        parser.set_defaults(func=cmd_act, action=name)
        return parser

    for spec in ACTIONS.values():
        parser = acting(spec.name, say(f"about_{spec.name}"))
        for name in spec.takes:
            TAKES[name](parser)
    for name, help_ in (("keep", "keep the image (its batch's picks)"),
                        ("reject", "reject the image"), ("unkeep", "take its rating back")):
        sub(name, help_).set_defaults(func=cmd_rate, rating=name)
    sub("lineage", "what the image was made from, and what was made from it").set_defaults(
        func=cmd_lineage)
    review = sub("review", "review the image: approved, rejected (--note: why), "
                 "changes_requested (--note: what to change, queued as an edit), unreviewed")
    review.add_argument("state", choices=[str(r) for r in Review])
    review.add_argument("--note", default="", help="the reason, or the changes asked for")
    review.set_defaults(func=cmd_review)
    stars = sub("stars", "grade the image 1 to 5 (0: no grade)")
    stars.add_argument("stars", type=int, choices=range(MAX_STARS + 1))
    stars.set_defaults(func=cmd_stars)
    sub("signoff", "sign a batch off once every image of it is reviewed", metavar="BATCH",
        about="the batch").set_defaults(func=cmd_signoff)
    move = sub("move", "admins: a waiting job, or a batch's waiting jobs, to the front or the "
               "back of their submitter's turns (docs/queue.md, fairness)", job_or_batch,
               "ID|bBATCH", "the job, or bBATCH: every waiting job of that batch")
    move.add_argument("to", choices=MOVES, help="first or last among its submitter's waiting jobs")
    move.set_defaults(func=cmd_move)


def job_or_batch(text: str) -> tuple[str, int]:
    """"12" -> job 12; "b12" -> batch 12's kept images."""
    kind, digits = ("kept", text[1:]) if text[:1].lower() == "b" else ("job", text)
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not a job id or bBATCH")
    return kind, int(digits)


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key.strip(), value


def cmd_act(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"action": args.action,
                            "wait_for_executor": args.wait_for_executor}
    for name in ("count", "factor", "strength"):
        if getattr(args, name, None) is not None:
            body[name] = getattr(args, name)
    if "values" in ACTIONS[args.action].takes:
        if not args.values and not args.instruction:
            print("genbot: give KEY=VALUE changes, or --instruction TEXT", file=sys.stderr)
            return 2
        body["values"] = dict(args.values)
    if getattr(args, "instruction", ""):
        body["instruction"] = args.instruction
    if getattr(args, "model", None):
        body["model"] = args.model
    if "mask" in ACTIONS[args.action].takes and args.mask is None and not args.region:
        print("genbot: give --mask FILE (white where to repaint) or --region WORDS",
              file=sys.stderr)
        return 2
    if getattr(args, "mask", None) is not None:
        with args.mask:
            body["mask"] = base64.b64encode(args.mask.read()).decode()
    if getattr(args, "region", ""):
        body["region"] = args.region
    if "margins" in ACTIONS[args.action].takes:
        body.update({side: getattr(args, side) for side in SIDES if getattr(args, side)})
        if args.aspect:
            body["aspect"] = args.aspect
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else {}

    kind, number = args.id
    path = f"/api/v1/jobs/{number}/actions" if kind == "job" else \
        f"/api/v1/batches/{number}/kept/actions"

    async def act(http: aiohttp.ClientSession) -> int:
        async with http.post(path, json=body, headers=headers) as r:
            done = await answer(r)
            if r.status not in (200, 201):
                return error(done, r.status)
        ids = ", ".join(str(j["id"]) for j in done["jobs"])
        of = f"job {done['parent']}" if kind == "job" else \
            f"the {done['kept']} kept image{'s' if done['kept'] != 1 else ''} of batch " \
            f"{done['of_batch']}"
        print(f"batch {done['batch']}: {done['action']} of {of} -> "
              f"job{'s' if len(done['jobs']) != 1 else ''} {ids}"
              + ("" if done["created"] else " (asked before: nothing new queued)"))
        return 0
    return _run(args, act)


def cmd_rate(args: argparse.Namespace) -> int:
    async def rate(http: aiohttp.ClientSession) -> int:
        async with http.put(f"/api/v1/jobs/{args.id}/rating",
                            json={"rating": RATINGS[args.rating]}) as r:
            job = await answer(r)
            if r.status != 200:
                return error(job, r.status)
        print(f"job {job['id']}: {SHOWN.get(job['rating'], job['rating'])}")
        return 0
    return _run(args, rate)


async def _asked(http: aiohttp.ClientSession, method: str, path: str,
                 body: Any = None) -> tuple[dict[str, Any], int | None]:
    """The API's answer, and the exit code where it refused (said on stderr)."""
    async with http.request(method, f"/api/v1{path}", json=body) as r:
        found = await answer(r)
        return found, None if r.status == 200 else error(found, r.status)


def cmd_review(args: argparse.Namespace) -> int:
    async def review(http: aiohttp.ClientSession) -> int:
        done, failed = await _asked(http, "PUT", f"/jobs/{args.id}/review",
                                    {"state": args.state, "note": args.note})
        if failed is not None:
            return failed
        job, change = done["job"], done.get("change")
        note = f": {job['review_note']}" if job.get("review_note") else ""
        print(f"job {job['id']}: {job['review'].replace('_', ' ')}{note}"
              + (f" (batch {change['batch']} makes the change)" if change else ""))
        return 0
    return _run(args, review)


def cmd_stars(args: argparse.Namespace) -> int:
    async def stars(http: aiohttp.ClientSession) -> int:
        job, failed = await _asked(http, "PUT", f"/jobs/{args.id}/stars",
                                   {"stars": args.stars or None})
        if failed is not None:
            return failed
        print(f"job {job['id']}: {'★' * (job['stars'] or 0) or 'no grade'}")
        return 0
    return _run(args, stars)


def cmd_move(args: argparse.Namespace) -> int:
    kind, ident = args.id
    noun = "batch" if kind == "kept" else "job"  # (bBATCH here: the batch itself)

    async def move(http: aiohttp.ClientSession) -> int:
        where = f"/batches/{ident}" if noun == "batch" else f"/jobs/{ident}"
        done, failed = await _asked(http, "POST", f"{where}/move", {"to": args.to})
        if failed is not None:
            return failed
        n = done["moved"]
        print(f"{noun} {ident}: {n} waiting "
              f"job{'' if n == 1 else 's'} moved to the {args.to}")
        return 0
    return _run(args, move)


def cmd_signoff(args: argparse.Namespace) -> int:
    async def signoff(http: aiohttp.ClientSession) -> int:
        done, failed = await _asked(http, "POST", f"/batches/{args.id}/signoff")
        if failed is not None:
            return failed
        counts = ", ".join(f"{n} {state.replace('_', ' ')}" for state, n in
                           done["reviews"].items())
        print(f"batch {done['batch']}: signed off by {done['signed_off']['by']} ({counts})")
        return 0
    return _run(args, signoff)


def cmd_lineage(args: argparse.Namespace) -> int:
    async def lineage(http: aiohttp.ClientSession) -> int:
        async with http.get(f"/api/v1/jobs/{args.id}") as r:
            job = await answer(r)
            if r.status != 200:
                return error(job, r.status)
        async with http.get(f"/api/v1/jobs/{args.id}/lineage") as r:
            line = await answer(r)
            if r.status != 200:
                return error(line, r.status)
        how = f"{job['action']} of job {job['parent_job_id']}" \
            if job["parent_job_id"] is not None else "a sheet's row"
        print(f"job {job['id']} (batch {job['batch']}, row {job['row']}): {how}, "
              f"{job['status']}, {SHOWN.get(job['rating'], job['rating'])}")
        print("made from: " + (" <- ".join(_described(j) for j in line["ancestors"]) or "-"))
        print("children: " + (", ".join(_described(j, how=True) for j in line["children"])
                              or "-"))
        return 0
    return _run(args, lineage)


def _described(job: dict, how: bool = False) -> str:
    what = [f"batch {job['batch']}", job["status"]]
    if how and job["action"]:
        what.insert(0, job["action"])
    if job["rating"]:
        what.append(job["rating"])
    return f"job {job['id']} ({', '.join(what)})"


def _run(args: argparse.Namespace,
         work: Callable[[aiohttp.ClientSession], Awaitable[int]]) -> int:
    server = server_of(args.server)
    token = token_for(server, args.token)
    if not token:
        return TOKEN_EXIT
    import aiohttp

    async def session() -> int:
        async with aiohttp.ClientSession(
                server, headers={"Authorization": f"Bearer {token}"},
                timeout=aiohttp.ClientTimeout(total=120)) as http:
            return await work(http)
    try:
        return asyncio.run(session())
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        return unreachable(server, e)
