"""Template versions on SQLite and PostgreSQL: numbered per name by content, the same list
for every connection, labels moved by promote."""

from __future__ import annotations

import asyncio

import pytest

from bot.intake.check import SheetFile
from storage.db import Database
from storage.versions import TemplateVersions


def own_templates(tmp_path, db_url: str, name: str):
    """A config whose templates folder holds a copy of shipped template `name`, to edit."""
    import shutil

    from storage import config as cfg
    from tests.conftest import ROOT
    folder = tmp_path / "templates"
    folder.mkdir()
    shutil.copy(ROOT / "templates" / "shipped" / f"{name}.json", folder)
    return cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                          "database": {"url": db_url}, "templates": {"dir": str(folder)},
                          "chat": {"submitters": ["test:ALICE"],
                                   "submitter_per_minute": 100}}), folder


async def test_versions_are_numbered_by_content_and_shared_by_every_connection(db_url):
    one, two = Database(db_url), Database(db_url)  # two hosts on one database
    await one.open()
    await two.open()
    try:
        a, b = TemplateVersions(one), TemplateVersions(two)
        v1 = await a.record("thumb", "aaa", {"template": {"name": "thumb"}}, "file on h1")
        again = await b.record("thumb", "aaa", {"template": {"name": "thumb"}}, "file on h2")
        assert (v1.number, again.number, again.source) == (1, 1, "file on h1")
        raced = await asyncio.gather(*(db.record("thumb", "bbb", {"v": 2}, f"host {i}")
                                       for i, db in enumerate((a, b, a, b))))
        assert {v.number for v in raced} == {2}  # one new version, whoever saw it first
        assert (await a.record("other", "aaa", {}, "x")).number == 1  # numbered per name
        assert [v.number for v in await b.history("thumb")] == [1, 2]
        assert (await b.latest("thumb")).hash == "bbb"
        assert (await a.get("thumb", 1)).content == {"template": {"name": "thumb"}}
        assert await a.get("thumb", 9) is None
        assert await a.labelled("thumb", "production") is None
        await a.promote("thumb", 1, "production", "cli:alice")
        await b.promote("thumb", 2, "production", "cli:bob")  # moved, not added
        assert await a.labelled("thumb", "production") == 2
        assert [(x.label, x.number, x.moved_by) for x in await a.labels("thumb")] == \
            [("production", 2, "cli:bob")]
    finally:
        await one.close()
        await two.close()


async def test_an_edited_template_is_a_new_version_and_pins_and_labels_choose(tmp_path, db_url):
    """Versions survive a restart (a new App on the same database); NAME@N runs version N
    after the file changed; a promoted label is what the plain name means; an action on
    an image runs the version that made it."""
    import json

    from bot.app.application import Accepted, App, load_templates
    from bot.app.iterate import ActionRequest
    from bot.errors import NotFound
    from storage.files import open_store
    from storage.queue import open_queue
    from templates.jobs import decode
    from tests.fakes.apps import ALICE, pictures
    from tests.fakes.jobs import finish_all

    config, folder = own_templates(tmp_path, db_url, "social_thumb")
    sheet = SheetFile("t.csv", b"image,title\nbottle.png,A\n")

    async def started() -> App:  # the service starting: the files as they are now
        made = App(config, queue, open_store(config), load_templates(config))
        await made.record_versions("test")
        return made

    def watermark(jobs) -> str:
        (step,) = [s for s in decode(jobs[0].workflow).nodes if s.op == "watermark"]
        return step.inputs["text"]

    queue = await open_queue(config)
    try:
        app = await started()
        assert app.templates["social_thumb"].number == 1
        first = await app.submit(ALICE, "social_thumb", sheet, pictures)
        assert isinstance(first, Accepted)
        (made,) = await finish_all(app, first.batch_id)
        assert decode(made.workflow).revision == 1
        from openpyxl import load_workbook

        from bot.app.results import write_results
        results, _ = write_results(app.store, await app.batch(first.batch_id), [made],
                                   app.templates["social_thumb"])
        rows = list(load_workbook(app.store.path(results)).active.iter_rows(values_only=True))
        assert rows[1][-1] == f"v1 · {app.templates['social_thumb'].version}"  # which made it

        data = json.loads((folder / "social_thumb.json").read_text())
        data["params"]["watermark"]["default"] = "v2 mark"  # the file is edited
        (folder / "social_thumb.json").write_text(json.dumps(data))
        app = await started()
        assert app.templates["social_thumb"].number == 2
        assert [v.number for v in await app.versions.history("social_thumb")] == [1, 2]
        latest = await app.submit(ALICE, "social_thumb", sheet, pictures)
        pinned = await app.submit(ALICE, "social_thumb@1", sheet, pictures)
        assert isinstance(latest, Accepted) and isinstance(pinned, Accepted)
        assert watermark(await app.queue.batch_jobs(latest.batch_id)) == "v2 mark"
        jobs = await app.queue.batch_jobs(pinned.batch_id)
        assert watermark(jobs) == "genbot" and decode(jobs[0].workflow).revision == 1
        assert (await app.batch(pinned.batch_id)).template == "social_thumb"

        await app.versions.promote("social_thumb", 1, "production", "test")
        plain = await app.submit(ALICE, "social_thumb", sheet, pictures)
        assert isinstance(plain, Accepted)
        assert watermark(await app.queue.batch_jobs(plain.batch_id)) == "genbot"
        assert (await app.resolve("social_thumb@production")).number == 1

        edit = await app.act(ALICE, made.id, ActionRequest("edit", values={"title": "B"}))
        assert decode(edit.jobs[0].workflow).revision == 1  # the version that made it
        for spec, code in (("social_thumb@9", "no_version"), ("social_thumb@beta", "no_label")):
            try:
                await app.resolve(spec)
            except NotFound as e:
                assert e.code == code, e
            else:
                raise AssertionError(spec)
    finally:
        await queue.close()


def test_genbot_template_history_diff_and_promote(tmp_path, capsys):
    import json
    import shutil

    from bot.cli import main
    from tests.conftest import ROOT
    folder = tmp_path / "templates"
    folder.mkdir()
    shutil.copy(ROOT / "templates" / "shipped" / "social_thumb.json", folder)
    config = tmp_path / "config.toml"
    config.write_text(f'[service]\ndata_dir = "{tmp_path / "data"}"\n'
                      f'[templates]\ndir = "{folder}"\n')

    def genbot(*argv: str) -> tuple[int, list[str]]:
        code = main(["template", *argv, "--config", str(config)])
        return code, capsys.readouterr().out.splitlines()

    code, out = genbot("history", "social_thumb")
    assert code == 0 and len(out) == 1
    assert out[0].startswith("social_thumb@1  ") and out[0].endswith("[the file now]")
    data = json.loads((folder / "social_thumb.json").read_text())
    data["params"]["watermark"]["default"] = "v2 mark"
    del data["params"]["band_color"]["aliases"]
    (folder / "social_thumb.json").write_text(json.dumps(data, ensure_ascii=False))
    code, out = genbot("history", "social_thumb")  # the edited file is version 2
    assert [line.split()[0] for line in out] == ["social_thumb@1", "social_thumb@2"]
    code, out = genbot("diff", "social_thumb", "1", "2")
    assert out == ['- params.band_color.aliases = ["色带颜色", "底色"]',
                   '~ params.watermark.default: "genbot" → "v2 mark"']
    assert genbot("diff", "social_thumb", "1", "7")[0] == 2
    code, out = genbot("promote", "social_thumb@1")
    assert (code, out) == (0, ["social_thumb@1 is now production: /gen social_thumb runs it"])
    code, out = genbot("history", "social_thumb")
    assert out[0].endswith("[production]") and out[1].endswith("[the file now]")


async def test_a_comparison_runs_each_row_through_both_versions_with_one_seed(tmp_path, db_url):
    import json

    from bot.app.application import Accepted, App, SubmitOptions, load_templates
    from bot.app.grids import grids_of
    from bot.errors import Conflict
    from storage.files import open_store
    from storage.queue import open_queue
    from templates.jobs import decode
    from tests.fakes.apps import ALICE, PRODUCTS, pictures
    from tests.fakes.jobs import finish_all

    config, folder = own_templates(tmp_path, db_url, "product_main")
    queue = await open_queue(config)
    try:
        app = App(config, queue, open_store(config), load_templates(config))
        await app.record_versions("test")
        data = json.loads((folder / "product_main.json").read_text())
        data["params"]["control_scale"]["default"] = 0.5  # version 2
        (folder / "product_main.json").write_text(json.dumps(data))
        app = App(config, queue, open_store(config), load_templates(config))
        await app.record_versions("test")
        done = await app.submit(ALICE, "product_main@1", PRODUCTS, pictures, SubmitOptions(
            compare=("product_main@2",), wait_for_executor=True))
        assert isinstance(done, Accepted) and done.jobs == 4
        batch = await app.batch(done.batch_id)
        assert batch.meta["compare"] == ["A product_main@1", "B product_main@2"]
        jobs = await finish_all(app, done.batch_id)
        bound = {j.id: decode(j.workflow) for j in jobs}
        for row in (2, 3):
            a, b = (bound[j.id] for j in jobs if j.row == row)
            assert (a.revision, b.revision) == (1, 2)
            assert a.params["seed"] == b.params["seed"]  # the same seed: only the version
            assert (a.params["control_scale"], b.params["control_scale"]) == (0.8, 0.5)
            assert b.outputs["out"] == a.outputs["out"].replace(".png", "_B.png")
        (grid, other) = grids_of(batch, jobs)  # per row: A and B side by side
        assert grid.x == "variant" and grid.xs == ["A product_main@1", "B product_main@2"]
        plain = await app.submit(ALICE, "product_main", PRODUCTS, pictures,
                                 SubmitOptions(wait_for_executor=True))
        assert isinstance(plain, Accepted)
        with pytest.raises(Conflict):  # no comparison to tally
            await app.ab(ALICE, plain.batch_id)
        row2 = [j for j in jobs if j.row == 2]
        await app.rate(ALICE, row2[1].id, "keep")  # row 2: B kept, A not
        found = await app.ab(ALICE, done.batch_id)
        assert (found.won, found.ties, found.unrated) == (
            {"A product_main@1": 0, "B product_main@2": 1}, 0, 1)
    finally:
        await queue.close()
