"""Spreadsheet intake: a template and a sheet in, bound jobs or a report of every problem out.

`check_sheet` is the one way in, for every front (through the application layer) and
`genbot validate`: the sheet as a file or as rows (the API's JSON), the pictures its
cells name, and the report. The whole sheet is checked before anything is queued: by
default all-or-nothing; with skip_invalid the valid rows go ahead and the rest are
reported. Each problem points at its cell (row as numbered in Excel, the column's header
as the user wrote it).
"""

from __future__ import annotations

import asyncio
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

from bot.intake import workers
from bot.intake.examples import example_attachments
from bot.intake.images import Attachments, ImageResolver, recording
from bot.intake.sheets import CellError, Heading, Sheet, SheetError, read_sheet
from bot.messages import Localized, say, visible
from bot.settings import IntakeConfig, assets_dir
from storage.config import Config
from storage.files import FileStore, reserved
from storage.queue import NewJob
from templates.actions import channel_extends
from templates.binding import bind
from templates.channels import CHANNELS_COLUMNS, Conflict, Missing, Plan, Unknown, missing_fields
from templates.expressions import ParamRef
from templates.families import row_refusal
from templates.graph import Template
from templates.jobs import BoundJob, DiffusersJob, encode
from templates.layouts import LOCALE_COLUMNS, LayoutProblem
from templates.params import Problem, coerce, normalize_header
from templates.settings import family_of, prompt_tokens
from templates.sizes import largest_image

YIELD_EVERY = 200  # rows; about 15 ms of work on a slow CPU
FamilyOf = Callable[[str], "str | None"]  # a model's family, where it can be told
TokensOf = Callable[[str], "Callable[[str], int] | None"]  # a model's prompt token counter


def _unknown(model: str) -> str | None:
    return None


def _uncounted(model: str) -> Callable[[str], int] | None:
    return None


@dataclass
class Issue:
    """One problem: of the file (row None), of a row, or of a cell (row and column)."""
    code: str
    details: dict[str, Any] = field(default_factory=dict)
    row: int | None = None
    column: str | None = None

    def render(self, lang: str = "en") -> str:
        details = {k: quoted(v) for k, v in self.details.items()}
        text = say(self.code, lang, **details)
        if self.row is None:
            return text
        if self.column is None:
            return say("row", lang, row=self.row, problem=text)
        return say("cell", lang, row=self.row, column=quoted(self.column), problem=text)


SHOWN_MAX = 120  # characters of a cell's text quoted in a message


def quoted(value: Any) -> Any:
    """A cell's text or a header as a sentence may quote it: as the cell shows it (a
    whole number without ".0"), control characters visible, long text cut."""
    if isinstance(value, Localized):
        return value
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"  # as a spreadsheet shows it
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str):
        value = visible(value)
        if len(value) > SHOWN_MAX:
            value = f"{value[:SHOWN_MAX - 20]}… ({len(value):,} characters)"
    return value


@dataclass(frozen=True)
class SheetFile:
    """A sheet as sent: its file name and bytes."""
    name: str
    data: bytes


@dataclass(frozen=True)
class SheetRows:
    """A sheet given as rows ({column: value}), as the API takes JSON."""
    rows: list[dict[str, Any]]
    name: str = "rows.json"

    def grid(self) -> Sheet:
        headers = list(dict.fromkeys(k for r in self.rows for k in r))
        return Sheet(self.name, 1, headers,
                     [(i + 2, [r.get(h) for h in headers]) for i, r in enumerate(self.rows)])


SheetSource = SheetFile | SheetRows


@dataclass
class IntakeReport:
    """What intake made of a sheet: the jobs it would queue, and every problem."""
    template: str
    filename: str
    jobs: list[NewJob] = field(default_factory=list)
    issues: list[Issue] = field(default_factory=list)
    file_issues: list[Issue] = field(default_factory=list)  # nothing can be read or run
    notes: list[Issue] = field(default_factory=list)  # worth saying, nothing wrong
    # (header, did-you-mean)
    unused_columns: list[tuple[str, str | None]] = field(default_factory=list)
    rows: int = 0
    bad_rows: int = 0
    header_row: int | None = None  # where the header was found (Excel's numbering)

    @property
    def ok(self) -> bool:
        """Every row is valid (the all-or-nothing rule)."""
        return not self.file_issues and not self.issues and bool(self.jobs)

    def problems(self, lang: str = "en") -> list[dict[str, Any]]:
        """Every problem as data: where (row, column), its code and its message."""
        return [{"row": i.row, "column": i.column, "code": i.code, "message": i.render(lang)}
                for i in self.file_issues + self.issues]

    def report(self, lang: str = "en", max_shown: int = 20, skip_invalid: bool = False) -> str:
        if self.file_issues:
            lines = [i.render(lang) for i in self.file_issues]
        elif not self.issues:
            lines = [say("all_valid", lang, file=self.filename, rows=self.rows,
                         template=self.template)]
        else:
            head = "some_skipped" if skip_invalid else "some_invalid"
            lines = [say(head, lang, file=self.filename, bad=self.bad_rows, rows=self.rows,
                         good=self.rows - self.bad_rows)]
            lines += [i.render(lang) for i in self.issues[:max_shown]]
            if len(self.issues) > max_shown:
                lines.append(say("and_more", lang, count=len(self.issues) - max_shown))
        lines += [i.render(lang) for i in self.notes]
        if self.unused_columns:
            shown = ", ".join(f'"{quoted(h)}"' + (say("did_you_mean", lang, name=s) if s else "")
                              for h, s in self.unused_columns)
            lines.append(say("unused_columns", lang, template=self.template, columns=shown))
        if self.file_issues:
            lines.append(say("file_refused", lang, file=self.filename))
        return "\n".join(lines)


def _closest(word: str, options: dict[str, str]) -> str | None:
    """The option (by normalised header) closest to `word`, as the template spells it."""
    match = difflib.get_close_matches(normalize_header(word), list(options), n=1, cutoff=0.75)
    return options[match[0]] if match else None


async def check_sheet(template: Template, sheet: SheetSource, *, config: Config,
                      store: FileStore, attachments: Attachments | None = None,
                      skip_invalid: bool = False,
                      keep: dict[str, bytes] | None = None,
                      channels: Plan | None = None) -> IntakeReport:
    """The report on `sheet` for `template`: its rows read, checked and bound, the
    pictures its cells name found (among `attachments`, then the assets folder, then
    allowed links; genbot's drawings only on its own example sheets, never in place of
    a person's missing picture) and stored. `keep` collects the attachments used, by
    name (a schedule stores them, since chat uploads expire). `channels`: the sales
    channels asked for (templates.channels.plan), bound into each row's job."""
    if keep is not None and attachments is not None:
        attachments = recording(attachments, keep)
    settings = config[IntakeConfig]
    images = ImageResolver(settings, store, assets_dir=assets_dir(config),
                           attachments=attachments)
    families = cache(partial(family_of, config))  # read once a sheet, not once a row
    counters = cache(partial(prompt_tokens, config))
    async with workers.turn(settings):  # a few at a time, first come first served
        if isinstance(sheet, SheetRows):
            return await intake_sheet(template, sheet.grid(), settings=settings, images=images,
                                      skip_invalid=skip_invalid, family_of=families,
                                      tokens_of=counters, channels=channels)
        return await intake(template, sheet.name, sheet.data, settings=settings,
                            images=images, skip_invalid=skip_invalid, family_of=families,
                            tokens_of=counters, channels=channels)


async def intake(template: Template, filename: str, data: bytes, *, settings: IntakeConfig,
                 images: ImageResolver, skip_invalid: bool = False,
                 family_of: FamilyOf = _unknown, tokens_of: TokensOf = _uncounted,
                 channels: Plan | None = None) -> IntakeReport:
    result = IntakeReport(template.name, filename)
    if len(data) > settings.max_file_mb * 2**20:
        result.file_issues.append(Issue("file_too_big", {"file": filename,
                                        "size_mb": len(data) / 2**20,
                                        "max_mb": settings.max_file_mb}))
        return result
    try:  # parsing is CPU work: off the event loop, so the service stays responsive
        sheet = await workers.run(settings, partial(
            read_sheet, max_unpacked_bytes=int(settings.max_unpacked_mb * 2**20),
            keep_rows=settings.max_rows + HEADER_SEARCH + 1), filename, data)
    except SheetError as e:
        result.file_issues.append(Issue(e.code, e.details))
        return result
    if sheet.example_of == template.name:  # genbot's own example: its drawings may stand in
        images.examples = example_attachments(template)
    result = await intake_sheet(template, sheet, settings=settings, images=images,
                                skip_invalid=skip_invalid, family_of=family_of,
                                tokens_of=tokens_of, channels=channels)
    if sheet.note is not None:
        result.notes.append(Issue(*sheet.note))
    return result


async def intake_sheet(template: Template, sheet: Sheet, *, settings: IntakeConfig,
                       images: ImageResolver, skip_invalid: bool = False,
                       family_of: FamilyOf = _unknown,
                       tokens_of: TokensOf = _uncounted,
                       channels: Plan | None = None) -> IntakeReport:
    """The checks on rows already read: from a file, or given as JSON by the API.
    `family_of` tells a model's family where it can (a row naming a model that cannot run
    what the row asks is refused), `tokens_of` counts a prompt's tokens as the model
    reads them where it can (one longer than the model reads is refused)."""
    filename = sheet.filename
    sheet = _find_header(template, sheet)
    result = IntakeReport(template.name, filename, header_row=sheet.header_row)
    result.rows = len(sheet.rows) + sheet.more_rows
    if result.rows > settings.max_rows:
        result.file_issues.append(Issue("too_many_rows", {"file": filename, "rows": result.rows,
                                                          "max": settings.max_rows}))
        return result
    if not sheet.rows:
        result.file_issues.append(Issue("no_rows", {"file": filename}))
        return result
    columns = _map_columns(template, sheet, result, channels)
    if channels is not None:
        for channel, name in missing_fields(channels.every_row, sheet.headers):
            result.file_issues.append(Issue("channel_no_column", {
                "channel": channel, "field": name, "file": filename}))
        if (binder := channels.layout) is not None:
            for name in binder.missing(sheet.headers):
                result.file_issues.append(Issue("layout_no_column", {
                    "layout": binder.layout.name, "field": name, "file": filename}))
    if result.file_issues:
        return result
    await _rows(template, sheet, columns, images, result, settings, family_of, tokens_of,
                channels)
    if images.used_examples:
        result.notes.append(Issue("example_pictures", {
            "names": ", ".join(dict.fromkeys(images.used_examples))}))
    if result.issues and not skip_invalid:
        result.jobs = []
    return result


HEADER_SEARCH = 30  # rows from the top where a header may sit below a title block


def _find_header(template: Template, sheet: Sheet) -> Sheet:
    """Exports from banks and business systems put a title block above the real header:
    the header is the row, among the first HEADER_SEARCH, naming the most of the
    template's columns (the first row unless a later one names more)."""
    known = {normalize_header(h) for p in template.params.values() for h in (p.name, *p.aliases)}
    known |= {normalize_header(c) for c in template.columns}

    def named(cells: list[Any]) -> int:
        return len({normalize_header(str(v)) for v in cells if not isinstance(v, CellError)
                    and v is not None} & known)
    scores = [named(cells) for _, cells in sheet.source[:HEADER_SEARCH]]
    if not scores or max(scores) <= scores[0]:
        return sheet
    return sheet.headed_at(scores.index(max(scores)))


def _map_columns(template: Template, sheet: Sheet, result: IntakeReport,
                 channels: Plan | None = None) -> dict[str, int]:
    """Parameter -> column index; records missing, duplicate and unused columns (one the
    channels' file names or the layout read is used)."""
    names = {normalize_header(header): p.name
             for p in template.params.values() for header in (p.name, *p.aliases)}
    spelled = {normalize_header(h): h for p in template.params.values()
               for h in (p.name, *p.aliases)}
    wanted_extras = {normalize_header(c): c for c in template.columns}
    own = {normalize_header(c) for c in (*CHANNELS_COLUMNS, *LOCALE_COLUMNS,
                                         *(channels.columns() if channels else ()))}
    columns: dict[str, list[int]] = {}
    unused: list[int] = []
    for i, header in enumerate(sheet.headers):
        key = normalize_header(header)
        if key in names:
            columns.setdefault(names[key], []).append(i)
        elif key not in wanted_extras and key not in own and header:
            unused.append(i)
    for param, found in columns.items():
        if len(found) > 1:
            result.file_issues.append(Issue("duplicate_column", {
                "param": Heading(template.params[param]),
                "columns": ", ".join(f'"{quoted(sheet.headers[i])}"' for i in found)}))
    present = {normalize_header(h) for h in sheet.headers}
    unused_headers = {normalize_header(sheet.headers[i]): sheet.headers[i] for i in unused}
    needed: list[str] = [Heading(p) for p in template.params.values()
              if p.required and p.default is None and p.name not in columns]
    needed += [c for k, c in wanted_extras.items() if k not in present]
    for name in needed:  # named as a sheet in the reader's language heads it
        near = _closest(name, unused_headers)
        result.file_issues.append(Issue("missing_column_near" if near else "missing_column",
                                        {"param": name, "near": near}))
    result.unused_columns = [(sheet.headers[i], _closest(sheet.headers[i], spelled))
                             for i in unused]
    return {param: found[0] for param, found in columns.items()}


async def _rows(template: Template, sheet: Sheet, columns: dict[str, int],
                images: ImageResolver, result: IntakeReport, settings: IntakeConfig,
                family_of: FamilyOf, tokens_of: TokensOf, channels: Plan | None = None) -> None:
    outputs: dict[str, int] = {}  # each output file name, and the first row that writes it
    delivered: dict[tuple[str, str], int] = {}  # each rendition's file, and its first row
    repeats: list[tuple[int, int, str]] = []
    for count, (number, cells) in enumerate(sheet.rows):
        if count % YIELD_EVERY == YIELD_EVERY - 1:
            await asyncio.sleep(0)  # let the event loop serve others during a big sheet
        values, named, issues = await _row_values(template, sheet, columns, images, settings,
                                                  number, cells)
        if not issues:
            extras = {h: cells[i] for i, h in enumerate(sheet.headers) if h}
            try:
                job = bind(template, values, row=number, extras=extras)
                job.named = named
            except Problem as e:
                issues.append(Issue(e.code, e.details, number))
            else:
                issues += _job_issues(job, number, outputs, settings)
                issues += _model_issues(template, sheet, columns, job, number, family_of,
                                        tokens_of)
                if channels is not None and channels.layout is not None:
                    issues += await workers.run(  # (setting words: CPU work, off the loop)
                        settings, _channels, channels, job, sheet.headers, extras, number,
                        delivered, repeats)
                elif channels is not None:
                    issues += _channels(channels, job, sheet.headers, extras, number,
                                        delivered, repeats)
        if issues:
            result.issues += issues
            result.bad_rows += 1
        else:
            result.jobs.append(NewJob(row=number, workflow=encode(job), affinity=job.affinity))
    if repeats:
        row, first, file = repeats[0]
        result.notes.append(Issue("channel_files_repeat", {
            "count": len(repeats), "row": row, "first": first, "file": file}))


def _channels(plan: Plan, job: BoundJob, headers: list[str], cells: dict[str, Any],
              number: int, delivered: dict[tuple[str, str], int],
              repeats: list[tuple[int, int, str]]) -> list[Issue]:
    """The row's sales channels bound into its job (every row's, and its channels cell's),
    or what is wrong with them: an unknown channel, a rule its pictures cannot meet, a
    file-name field with no value. A file name another row gives too is noted in
    `repeats` (row, first row, file): the later gets -2 (bot.app.application.named_apart)."""
    header = next((h for h in headers if normalize_header(h) in
                   {normalize_header(c) for c in CHANNELS_COLUMNS}), None)
    cell = cells.get(header) if header else None
    try:
        job.deliver = plan.bind(plan.for_row(cell), {**cells, **job.params})
        if plan.fill_model and isinstance(job, DiffusersJob):  # (an extend grows it first)
            grown = channel_extends(job, plan.fill_model)
            assert isinstance(grown, DiffusersJob)
            job.nodes, job.outputs, job.deliver = grown.nodes, grown.outputs, grown.deliver
    except Unknown as e:
        return [Issue("channel_unknown_close" if e.close else "channel_unknown",
                      {"name": e.name, "close": e.close, "names": ", ".join(e.known)},
                      number, header)]
    except Conflict as e:
        return [Issue(e.code, e.details, number, header)]
    except Missing as e:
        return [Issue("channel_empty_field", {"channel": e.channel, "field": e.field},
                      number, e.field)]
    except LayoutProblem as e:
        return [Issue(e.code, e.details, number, e.column)]
    for d in job.deliver:
        first = delivered.setdefault((d.channel, d.file), number)
        if first != number:
            repeats.append((number, first, d.file))
    return []


async def _row_values(template: Template, sheet: Sheet, columns: dict[str, int],
                      images: ImageResolver, settings: IntakeConfig, number: int,
                      cells: list[Any]) -> tuple[dict[str, Any], dict[str, str], list[Issue]]:
    """A row's value for each parameter, read from its cell (an image fetched); each
    image parameter's value as the sheet named it; and what is wrong, cell by cell."""
    issues: list[Issue] = []
    values: dict[str, Any] = {}
    named: dict[str, str] = {}
    for p in template.params.values():
        index = columns.get(p.name)
        raw = cells[index] if index is not None else None
        column = sheet.headers[index] if index is not None else p.name
        try:
            if isinstance(raw, CellError):
                raise Problem("cell_error", shown=str(raw))
            if isinstance(raw, str) and len(raw) > settings.max_cell_chars:
                raise Problem("cell_too_long", chars=len(raw), max=settings.max_cell_chars)
            value = coerce(p, raw)
            if p.picture and value is not None:
                named[p.name] = str(value)
                value = await images.resolve(value)
            values[p.name] = value
        except Problem as e:
            issues.append(Issue(e.code, {"value": raw, **e.details}, number, column))
    return values, named, issues


def _model_issues(template: Template, sheet: Sheet, columns: dict[str, int], job: BoundJob,
                  number: int, family_of: FamilyOf, tokens_of: TokensOf) -> list[Issue]:
    """A row whose model cannot run what the row asks of it (templates.families), at the
    cell that asked: the model's column, or the negative's, or the last picture's, or the
    prompt's (where a column is the whole prompt; else the row)."""
    issues = []
    for step in getattr(job, "nodes", []):  # a ComfyUI job's server checks its own
        model = step.inputs.get("model")
        family = family_of(model) if isinstance(model, str) else None
        if family is None or (refused := row_refusal(
                step.op, step.inputs, family, tokens_of(model))) is None:
            continue
        given, code, details = refused
        expr = template.nodes[step.id].inputs.get(given)
        param = expr.name if isinstance(expr, ParamRef) else None
        index = columns.get(param) if param else None
        issues.append(Issue(code, details, number,
                            sheet.headers[index] if index is not None else None))
    return issues


def _job_issues(job: BoundJob, number: int, outputs: dict[str, int],
                settings: IntakeConfig) -> list[Issue]:
    """What is wrong with a row's bound job: an image past [intake] max_output_pixels, an
    output file that is the batch's own or another row's (`outputs` learns its names)."""
    issues = []
    size = largest_image(job)
    if size is not None and size[0] * size[1] > settings.max_output_pixels:
        issues.append(Issue("image_too_large", {
            "width": size[0], "height": size[1], "megapixels": size[0] * size[1] / 1e6,
            "max": settings.max_output_pixels / 1e6}, number))
    for name in job.outputs.values():
        if (own := reserved(name)) is not None:
            issues.append(Issue("output_batch_file", {"name": name, "own": own}, number))
        elif name in outputs:
            issues.append(Issue("output_duplicate", {"name": name, "other": outputs[name]},
                                number))
        outputs.setdefault(name, number)
    return issues
