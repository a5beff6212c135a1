"""Refine a sweep from its ratings: which swept values people kept, and the next, narrower
sweep around the best — simple counts anyone can check, not a black box.

Per axis of the sweep, each value's images: kept, rejected, rated, and its keep rate
(kept ÷ rated; images nobody rated do not count against it). The best value is the one
with the highest keep rate (more kept breaks a tie, then the smaller value). The next
sweep:
  numbers   zoom in: the best value and the midpoints to its neighbours (its neighbour
            itself at the edge of the range), rounded for a whole-number parameter
  others    the values kept at least half as often as the best, in their order
An axis whose values were never rated stays as it was. The proposal is the exact command
line to run it (`/gen TEMPLATE SHEET --vary … --seeds N`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from storage.records import KEPT, REJECTED, Batch, Job, Status
from templates.binding import as_text
from templates.sweeps import VARIANT


@dataclass(frozen=True)
class Tally:
    value: Any
    kept: int
    rejected: int
    images: int

    @property
    def rated(self) -> int:
        return self.kept + self.rejected

    @property
    def rate(self) -> float | None:
        return self.kept / self.rated if self.rated else None


@dataclass(frozen=True)
class AxisProposal:
    param: str
    tallies: list[Tally]
    best: Any | None  # None: nothing of it was rated
    next: list[Any]  # the values of the next sweep


@dataclass(frozen=True)
class Proposal:
    batch: Batch
    axes: list[AxisProposal]
    seeds: int
    command: str
    rated: int  # images rated in all

    @property
    def vary(self) -> list[str]:
        return [f"{a.param}={','.join(as_text(v) for v in a.next)}" for a in self.axes]


def tallies(param: str, jobs: list[Job]) -> list[Tally]:
    """Each value of `param` the sweep tried, in the order tried, with its ratings."""
    found: dict[str, list[Any]] = {}
    for job in sorted(jobs, key=lambda j: j.id):
        axes = job.workflow.get("axes") or {}
        if param not in axes or job.status != Status.SUCCEEDED:
            continue
        key = repr(axes[param])
        entry = found.setdefault(key, [axes[param], 0, 0, 0])
        entry[1] += job.rating == KEPT
        entry[2] += job.rating == REJECTED
        entry[3] += 1
    return [Tally(*entry) for entry in found.values()]


def best_of(tallied: list[Tally]) -> Tally | None:
    rated = [t for t in tallied if t.rate is not None]
    if not rated:
        return None
    return max(rated, key=lambda t: (t.rate, t.kept, -_number(t.value, 0)))


def narrowed(tallied: list[Tally], best: Tally, whole: bool) -> list[Any]:
    values = [t.value for t in tallied]
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        ordered = sorted(values)
        i = ordered.index(best.value)
        around = [best.value]
        if i > 0:
            around.insert(0, _mid(ordered[i - 1], best.value, whole))
        if i + 1 < len(ordered):
            around.append(_mid(best.value, ordered[i + 1], whole))
        return sorted(set(around))
    assert best.rate is not None
    return [t.value for t in tallied if t.rate is not None and t.rate * 2 >= best.rate] or \
        [best.value]


def _mid(a: float, b: float, whole: bool) -> float:
    middle = (a + b) / 2
    return round(middle) if whole else round(middle, 4)


def _number(value: Any, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else default


def propose(batch: Batch, jobs: list[Job], whole: dict[str, bool], template: str,
            sheet: str) -> Proposal:
    """The next sweep for `batch`; `whole`: which swept parameters are whole numbers."""
    sweep = batch.meta.get("sweep") or {}
    axes = []
    for param in [a for a in sweep.get("axes") or [] if a != VARIANT]:  # (A/B: not a value)
        tallied = tallies(param, jobs)
        best = best_of(tallied)
        if best is None:
            axes.append(AxisProposal(param, tallied, None, [t.value for t in tallied]))
        else:
            axes.append(AxisProposal(param, tallied, best.value,
                                     narrowed(tallied, best, whole.get(param, False))))
    seeds = int(sweep.get("seeds") or 1)
    varies = " ".join(f"--vary {_quoted(f'{a.param}=' + ','.join(as_text(v) for v in a.next))}"
                      for a in axes)
    command = f"/gen {template} {_quoted(sheet)} {varies}".rstrip() + \
        (f" --seeds {seeds}" if seeds > 1 else "")
    rated = sum(1 for j in jobs if j.rating in (KEPT, REJECTED))
    return Proposal(batch, axes, seeds, command, rated)


def _quoted(text: str) -> str:
    import shlex
    return shlex.quote(text)


@dataclass(frozen=True)
class Comparison:
    """An A/B batch's ratings by row: which version's image was kept where the other's
    was not (a row won), both or neither (a tie), or nothing rated."""
    batch: Batch
    variants: list[str]  # "A social_thumb@3", "B social_thumb@4"
    won: dict[str, int]  # variant -> rows it won
    ties: int
    unrated: int

    @property
    def rated(self) -> int:
        return sum(self.won.values()) + self.ties


def compare_ratings(batch: Batch, jobs: list[Job]) -> Comparison:
    variants = list(batch.meta.get("compare") or [])
    rows: dict[tuple[Any, ...], dict[str, list[int | None]]] = {}
    for job in jobs:
        axes = dict(job.workflow.get("axes") or {})
        variant = axes.pop(VARIANT, None)
        if variant is None:
            continue
        # One "row" of the comparison: the sheet's row and any swept values besides A/B.
        key = (job.row, *sorted((k, repr(v)) for k, v in axes.items()))
        rows.setdefault(key, {}).setdefault(variant, []).append(job.rating)
    won = dict.fromkeys(variants, 0)
    ties = unrated = 0
    for by_variant in rows.values():
        ratings = [r for rs in by_variant.values() for r in rs]
        if not any(r in (KEPT, REJECTED) for r in ratings):
            unrated += 1
            continue
        kept = [v for v, rs in by_variant.items() if KEPT in rs]
        if len(kept) == 1:
            won[kept[0]] = won.get(kept[0], 0) + 1
        else:
            ties += 1
    return Comparison(batch, variants, won, ties, unrated)
