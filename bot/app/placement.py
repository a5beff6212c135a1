"""Whether any running executor can take a job, known before anyone waits for it.

Executors say in the worker registry what they take and why not the rest: a diffusers
executor the models it may hold (`allow`) and, for each model it leaves, why — not among
its [executor] models, its file missing on that host, too big for its memory; a ComfyUI
executor, once connected, each template its server lacks a node class or a file for.
From those rows this module tells, for what a batch's jobs need (their affinities: a
model, or `comfyui:TEMPLATE`), which need no running executor can meet, and what each
said. An engine with no executor running yet, or a ComfyUI server not connected yet,
says nothing: an executor may still come, so the need is not called unmet.

Submission refuses such a batch unless asked to queue it anyway; /status, /queue, the
API, the dashboard, the progress line and one notice in the thread say it of a batch
that waits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bot.errors import Conflict
from bot.messages import Joined, Phrase
from storage.records import WorkerInfo
from templates.jobs import COMFY

DIFFUSERS = "diffusers"


@dataclass(frozen=True)
class Unplaced:
    """A need no running executor meets: `need` an affinity, `why` each executor's word."""
    need: str
    why: tuple[str, ...]

    @property
    def what(self) -> Phrase:
        """The need as a person reads it: "model sdxl", "ComfyUI template poster"."""
        engine, _, name = self.need.partition(":")
        if engine == COMFY and name:
            return Phrase("need_comfy", name=name)
        return Phrase("need_model", need=self.need)


class NoExecutor(Conflict):
    """A submission whose jobs no running executor can take."""

    def __init__(self, unplaced: list[Unplaced]):
        super().__init__("no_executor",
                         what=Joined(u.what for u in unplaced),
                         why="; ".join(w for u in unplaced for w in u.why))
        self.unplaced = unplaced


def engine_of(worker: WorkerInfo) -> str:
    """The engine an executor runs (rows written before executors said so: diffusers)."""
    return str(worker.stats.get("engine") or DIFFUSERS)


def unplaced(needs: Iterable[str | None], workers: Iterable[WorkerInfo]) -> list[Unplaced]:
    """The needs among `needs` that the live executors in `workers` all refuse."""
    live = [w for w in workers if w.live]
    found = []
    for need in sorted({n for n in needs if n}):
        engine, _, template = need.partition(":")
        if engine == COMFY and template:
            speaking = [w for w in live if engine_of(w) == COMFY
                        and not (w.doing and w.doing[0] == "server_down")]
            refusing = [w for w in speaking if template in w.cannot_run]
            why = tuple(f"{w.device}: {w.cannot_run[template]}" for w in refusing)
        else:
            speaking = [w for w in live if engine_of(w) == DIFFUSERS]
            refusing = [w for w in speaking if w.allow is not None and need not in w.allow]
            why = tuple(f"{w.id}: " + (w.cannot_run.get(need) or "it takes only "
                                        + (", ".join(w.allow or ()) or "no model"))
                        for w in refusing)
        if speaking and len(refusing) == len(speaking):
            found.append(Unplaced(need, why))
    return found
