"""Jobs as the bot queues them, for tests that run the executor without the chat side."""

from __future__ import annotations

import copy

from bot.intake.check import intake
from bot.intake.images import ImageResolver, folder_attachments
from bot.settings import assets_dir
from storage.files import FileStore
from storage.queue import NewJob
from templates.loader import load_templates
from templates.settings import templates_dir
from tests.conftest import ROOT


async def example_jobs(config, name: str) -> list[NewJob]:
    """The jobs the bot would queue for the template's example sheet."""
    templates, _ = load_templates(templates_dir(config))
    sheet = ROOT / "examples" / f"{name}.xlsx"
    images = ImageResolver(config.intake, FileStore(config.data_dir), assets_dir=assets_dir(config),
                           attachments=folder_attachments(sheet.parent))
    result = await intake(templates[name], sheet.name, sheet.read_bytes(),
                          settings=config.intake, images=images)
    assert result.ok, result.report()
    return result.jobs


def with_generate(job: NewJob, row: int | None = None, **inputs) -> NewJob:
    """A copy of `job` with its generate node's inputs changed."""
    workflow = copy.deepcopy(job.workflow)
    for node in workflow["nodes"]:
        if node["op"] == "generate":
            node["inputs"].update(inputs)
    if row is not None:
        workflow["row"] = row
        for node in workflow["nodes"]:
            if node["op"] == "save":
                node["inputs"]["name"] = workflow["outputs"][node["id"]] = f"row_{row}.png"
    return NewJob(row=row or job.row, workflow=workflow, affinity=job.affinity)


async def finish_all(app, batch_id: int) -> list:
    """Every queued job completed with a small image, as an executor would (no GPU):
    finished images to act on, rate and pick. Returns the batch's jobs."""
    import io

    from PIL import Image
    while (lease := await app.queue.claim("test-executor")) is not None:
        buf = io.BytesIO()
        Image.new("RGB", (64, 48), "red").save(buf, "PNG")
        path = app.store.write(f"outputs/batch_{lease.batch_id}/{lease.job_id}.png",
                               buf.getvalue())
        await app.queue.complete(lease, [path])
    return await app.queue.batch_jobs(batch_id)
