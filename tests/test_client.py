"""bot/client.py against the real service on loopback: submit a sheet (its pictures found
beside it), wait with progress, download, and the server's refusals as GenbotError; the
same calls with AsyncClient."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from bot.client import AsyncClient, Client, GenbotError
from tests.conftest import PYTHON, ROOT, python_env
from tests.fakes.api import ADMIN, ALICE, BOTTLE, REVIEWER, VIEWER, ApiWorld, api_config


async def test_submit_wait_download_and_refusals(tmp_path, demo_models):
    work = tmp_path / "work"
    work.mkdir()
    (work / "bottle.png").write_bytes(BOTTLE)
    sheet = work / "thumbs.csv"
    sheet.write_text("image,title\nbottle.png,One\nbottle.png,Two\n")
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        w.start_executor()

        def script() -> tuple:  # a script of its own: no event loop
            seen = []
            with Client(w.url, ALICE) as genbot:
                batch = genbot.submit("social_thumb", sheet, vary=["width=256,512"],
                                      key="nightly-1")
                again = genbot.submit("social_thumb", sheet, vary=["width=256,512"],
                                      key="nightly-1")  # a retried call: the same batch
                done = batch.wait(progress=lambda b: seen.append(b.done), poll=0.2,
                                  timeout=120)
                files = done.download(tmp_path / "out")
                jobs = done.jobs()
                with pytest.raises(GenbotError) as refused:
                    genbot.submit("nope", sheet)
            return batch, again, done, seen, files, jobs, refused.value

        batch, again, done, seen, files, jobs, refused = await asyncio.to_thread(script)
        assert (batch.total, again.id) == (4, batch.id)
        assert done.finished and done.counts == {"succeeded": 4} and seen[-1] == 4
        assert [f.name for f in files] == [*(f"row{j.row}-job{j.id}-0.png" for j in jobs),
                                           "contact.png", "results.xlsx"]
        assert all(f.stat().st_size > 0 for f in files)
        assert (refused.status, refused.code) == (404, "no_template")
        assert "no template 'nope'" in refused.message

        async with AsyncClient(w.url, VIEWER) as viewer:
            with pytest.raises(GenbotError) as e:
                await viewer.submit("social_thumb", sheet)
            assert (e.value.status, e.value.code) == (403, "refused_role")
        async with AsyncClient(w.url, REVIEWER) as reviewer:
            kept = await reviewer.rate(jobs[0].id, "keep")
            assert (kept.rating, kept.review) == ("kept", "approved")
            with pytest.raises(GenbotError) as e:
                await reviewer.sign_off(batch.id)
            assert (e.value.status, e.value.code) == (409, "signoff_unreviewed")
            rejected = await reviewer.review(jobs[1].id, "rejected", "title cut off")
            assert (rejected.review, rejected.review_note) == ("rejected", "title cut off")
            assert (await reviewer.stars(jobs[2].id, 5)).stars == 5
            for job in jobs[2:]:
                await reviewer.review(job.id, "approved")
            signed = await reviewer.sign_off(batch.id)
            assert signed["signed_off"]["by"] == "api:rex"
            assert signed["reviews"] == {"approved": 3, "rejected": 1}
        from bot.cli import main  # genbot submit --download: through the client
        code = await asyncio.to_thread(main, [
            "submit", "social_thumb", str(sheet), "--download", str(tmp_path / "cli"),
            "--server", w.url, "--token", ALICE])
        assert code == 0
        assert sorted(p.name for p in (tmp_path / "cli").iterdir()) == \
            ["contact.png", "results.xlsx", "row2-job5-0.png", "row3-job6-0.png"]

        async with AsyncClient(w.url, ADMIN) as admin:
            made = await admin.act(jobs[1].id, "upscale")
            finished = await made.wait(poll=0.2, timeout=120)
            assert finished.counts == {"succeeded": 1}
            (child,) = await admin.jobs(made.id)
            assert (child.parent_job_id, child.action) == (jobs[1].id, "upscale")

        # A script that never closes its client, and `genbot submit`, as processes of their
        # own: the script's output is its own (no "Unclosed connector" at exit), and
        # submit points a person at the batch's dashboard page, not at the API.
        script = await asyncio.to_thread(python, "-c", "from bot.client import Client\n"
                                         f"genbot = Client({w.url!r}, {ALICE!r})\n"
                                         f"print(genbot.submit('social_thumb', {str(sheet)!r}).id)")
        assert script.returncode == 0 and script.stderr == "", script.stderr
        cli = await asyncio.to_thread(python, "-m", "bot.cli", "submit", "social_thumb",
                                      str(sheet), "--server", w.url, "--token", ALICE)
        assert cli.returncode == 0, cli.stderr
        new = int(script.stdout) + 1
        assert cli.stdout.splitlines()[0] == \
            f"batch {new}: 2 social_thumb jobs ({w.url}/dashboard/#/batches/{new})"


def python(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, *args], cwd=ROOT, env=python_env(), capture_output=True,
                          text=True, timeout=120)


def test_the_client_imports_without_torch_or_the_rest_of_genbot():
    done = subprocess.run([PYTHON, "-c", "import sys, bot.client; print(sorted(m for m in "
                           "sys.modules if m.split('.')[0] in ('torch', 'diffusers', 'bot')))"],
                          cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['bot', 'bot.client']"
