"""Sweeps: one submission over many values of its parameters, as AUTOMATIC1111's X/Y/Z plot.

  --vary KEY=V1,V2,…             the values listed, each read as a sheet's cell would be
                                 ("1024x768", "是", "dpm++_2m"); quote one holding a
                                 comma: --vary 'prompt="a cat, asleep",a dog'
  --vary KEY=START..STOP:STEP    numbers from START to STOP, both included, by STEP
                                 (1 when left out): steps=10..40:10 is 10, 20, 30, 40
  --seeds N                      N seeds per row: the row's own and N−1 drawn, each shared
                                 by every combination, so within one seed only the swept
                                 values differ (a grid compares like with like)

A KEY is a parameter's name or any of its column headers. The jobs are every row × every
seed × every combination of the axes (the last axis changing fastest), each bound like a
sheet's row (templates.binding) and recording its axis values (`axes`) for the grid and
the results sheet. A row's jobs share its batch folder, so the n-th saves as NAME_n.
What cannot be swept is a `Problem` naming the key, never a partial sweep.
"""

from __future__ import annotations

import csv
import difflib
import itertools
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec

from templates.actions import renamed, siblings
from templates.binding import bind
from templates.params import Param, Problem, coerce, draw_seed

if TYPE_CHECKING:
    from templates.graph import Template
    from templates.jobs import BoundJob

MAX_VALUES = 100  # on one axis
MAX_SEEDS = 100
MAX_JOBS = 100_000  # expanded, before the queue's own limits (which also apply)
RANGE = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*\.\.\s*(-?\d+(?:\.\d+)?)\s*(?::\s*(\d+(?:\.\d+)?))?\s*")


@dataclass(frozen=True)
class Axis:
    param: str  # the template parameter it sweeps
    key: str  # as the person wrote it
    values: tuple[Any, ...]  # typed, in the order given


@dataclass(frozen=True)
class Sweep:
    axes: tuple[Axis, ...] = ()
    seeds: int = 1
    grid: tuple[str, ...] = ()  # the parameters across and down its grids ("seed" too)

    @property
    def combinations(self) -> int:
        return math.prod(len(a.values) for a in self.axes) * self.seeds

    def __bool__(self) -> bool:
        return bool(self.axes) or self.seeds > 1


def plan(t: Template, vary: list[str] | tuple[str, ...], seeds: int = 1,
         grid: list[str] | tuple[str, ...] = ()) -> Sweep:
    """The sweep `vary` and `seeds` ask of template `t`, every value checked; `grid`: the
    keys its grids put across and down (default: the first two swept)."""
    if not 1 <= seeds <= MAX_SEEDS:
        raise Problem("sweep_seeds", value=seeds, max=MAX_SEEDS)
    if seeds > 1 and not any(p.type == "seed" for p in t.params.values()):
        raise Problem("sweep_no_seed", template=t.name)
    axes: list[Axis] = []
    for text in vary:
        key, raws = _split(text)
        p = _param(t, key)
        if p.picture:
            raise Problem("sweep_image", key=key)
        if any(a.param == p.name for a in axes):
            raise Problem("sweep_twice", key=key)
        values = []
        for raw in raws:
            try:
                values.append(coerce(p, raw))
            except Problem as e:
                raise Problem(e.code, **{**e.details, "key": key}) from None
        axes.append(Axis(p.name, key, tuple(values)))
    sweep = Sweep(tuple(axes), seeds, _grid(t, grid, axes, seeds))
    if sweep.combinations > MAX_JOBS:
        raise Problem("sweep_too_big", jobs=sweep.combinations, max=MAX_JOBS)
    return sweep


def expand(t: Template, rows: list[BoundJob], sweep: Sweep) -> list[BoundJob]:
    """Every row × seed × combination, bound; a row's own seed comes first."""
    if len(rows) * sweep.combinations > MAX_JOBS:
        raise Problem("sweep_too_big", jobs=len(rows) * sweep.combinations, max=MAX_JOBS)
    seed_params = [p.name for p in t.params.values() if p.type == "seed"]
    names = [a.param for a in sweep.axes]
    out: list[BoundJob] = []
    for row in rows:
        seed_sets = [{n: row.params.get(n) for n in seed_params}] + [
            {n: draw_seed() for n in seed_params}
            for _ in range(sweep.seeds - 1)]
        jobs = []
        for number, seeds in enumerate(seed_sets, 1):
            for combo in itertools.product(*(a.values for a in sweep.axes)):
                swept = dict(zip(names, combo, strict=True))
                job = bind(t, {**row.params, **swept, **seeds}, row=row.row, extras=row.columns)
                axes = {**swept, **({"seed": number} if sweep.seeds > 1 else {})}
                jobs.append(msgspec.structs.replace(job, named=dict(row.named), axes=axes,
                                                   deliver=list(row.deliver)))
        out += siblings(jobs)
    return out


def _grid(t: Template, keys: list[str] | tuple[str, ...], axes: list[Axis],
          seeds: int) -> tuple[str, ...]:
    if not keys:
        return ()
    if len(keys) > 2:
        raise Problem("sweep_grid_count")
    swept = [a.param for a in axes] + (["seed"] if seeds > 1 else [])
    chosen = []
    for key in keys:
        p = t.param_for(key)
        name = "seed" if key.strip().lower() == "seed" and seeds > 1 else (p and p.name)
        if name not in swept:
            raise Problem("sweep_grid", key=key, axes=", ".join(swept) or "-")
        chosen.append(str(name))
    return tuple(chosen)


def _split(text: str) -> tuple[str, list[str]]:
    key, sep, rest = text.partition("=")
    if not sep or not key.strip() or not rest.strip():
        raise Problem("sweep_syntax", value=text[:80])
    key = key.strip()
    if (m := RANGE.fullmatch(rest)) is not None:
        return key, _range(key, *m.groups())
    try:
        values = next(csv.reader([rest], skipinitialspace=True))
    except (csv.Error, StopIteration):
        raise Problem("sweep_syntax", value=text[:80]) from None
    values = [v.strip() for v in values]
    if not all(values):
        raise Problem("sweep_empty_value", key=key)
    if len(values) > MAX_VALUES:
        raise Problem("sweep_values", key=key, count=len(values), max=MAX_VALUES)
    return key, values


def _range(key: str, start: str, stop: str, step: str | None) -> list[str]:
    a, b, s = float(start), float(stop), float(step or 1)
    if s <= 0:
        raise Problem("sweep_step", key=key)
    if b < a:
        raise Problem("sweep_backwards", key=key, start=start, stop=stop)
    count = math.floor((b - a) / s + 1e-9) + 1
    if count > MAX_VALUES:
        raise Problem("sweep_values", key=key, count=count, max=MAX_VALUES)
    whole = all("." not in x for x in (start, stop, step or "1"))
    places = max(len(x.partition(".")[2]) for x in (start, stop, step or "1"))
    return [str(int(a + i * s)) if whole else f"{a + i * s:.{places}f}" for i in range(count)]


def _param(t: Template, key: str) -> Param:
    """The parameter `key` names; else a Problem listing them, with the name or column
    header closest to a typo (`stepz`: steps), as an unknown template name gets."""
    found = t.param_for(key)
    if found is None:
        names = ", ".join(t.params)
        known = {n.lower(): n for p in t.params.values() for n in (*p.aliases, p.name)}
        close = difflib.get_close_matches(key.strip().lower(), list(known), n=1, cutoff=0.6)
        if close:
            raise Problem("sweep_unknown_close", key=key, name=known[close[0]], names=names)
        raise Problem("sweep_unknown", key=key, names=names)
    return found


VARIANT = "variant"  # the axis of a comparison (--compare): A, B … each a template version


def variant_label(index: int, t: Template) -> str:
    """"A social_thumb@3": the letter a comparison's sheet shows, and what it ran."""
    return f"{chr(ord('A') + index)} {t.name}@{t.number}" if t.number else \
        f"{chr(ord('A') + index)} {t.name}"


def compare(variants: list[Template], jobs: list[BoundJob],
            rows: list[dict[int, BoundJob]]) -> list[BoundJob]:
    """Each job of the first version (a row, or a sweep's combination) again through each
    other version: the row as that version reads the sheet (its own defaults and
    columns; `rows[i]` by row number, for variant i + 1), with the first's swept values
    and seeds, so only the version differs. Files named apart (NAME_B.png …); each job
    records its variant among its axes, so a comparison's grid puts A and B side by side."""
    if len(variants) > 26:
        raise Problem("compare_too_many", count=len(variants))
    out: list[BoundJob] = []
    for job in jobs:
        out.append(msgspec.structs.replace(
            job, axes={**job.axes, VARIANT: variant_label(0, variants[0])}))
        for i, t in enumerate(variants[1:], 1):
            row = rows[i - 1].get(job.row)
            if row is None:
                continue  # (a row this version refused: its report says why)
            same = {n: v for n, v in job.params.items() if n in t.params and (
                n in job.axes or t.params[n].type == "seed")}
            child = bind(t, {**row.params, **same}, row=job.row, extras=row.columns)
            child = renamed(child, chr(ord("A") + i), like=job.outputs)
            out.append(msgspec.structs.replace(
                child, named=dict(row.named), deliver=list(job.deliver),
                axes={**job.axes, VARIANT: variant_label(i, t)}))
    return out
