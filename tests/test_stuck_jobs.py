"""The stuck-job alarm: a job claimed ahead that never starts, a running job whose steps
stopped, a job held by an executor that is gone — seen in /metrics (what an alert rule
reads), listed by `genbot queue doctor`, /doctor in chat and GET /queue/leases, and
handed back to the queue by each of them, admins only, so that the batch goes on."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from bot.cli import main
from storage import config as cfg
from storage.queue import NewJob, Submission, open_queue
from tests.fakes.api import ADMIN, ALICE, VIEWER, ApiWorld, api_config
from tests.fakes.chat import World

HOUR = 3600.0


async def stick(queue) -> dict[str, int]:
    """Four jobs under leases: claimed ahead an hour ago, running with no step for an hour,
    running and busy (a step just now), and held by an executor the registry says stopped.
    Returns their ids by name."""
    from storage.workers import Workers
    await queue.enqueue(Submission("t", "test:alice", [NewJob(row=r, workflow={})
                                                         for r in range(2, 7)]))
    quiet = await queue.claim("gpu:1")
    busy = await queue.claim("gpu:2")
    gone = await queue.claim("gpu:3")
    ahead = await queue.claim("gpu:1", ahead=True)
    await queue.progress(busy, {"step": 1, "total": 9})
    await queue.db.execute("UPDATE jobs SET started_at = started_at - $1, "
                           "leased_at = leased_at - $1 WHERE id IN ($2, $3)",
                           HOUR, quiet.job_id, ahead.job_id)
    workers = Workers.of(queue)
    for name in ("gpu:1", "gpu:2", "gpu:3"):
        await workers.beat(name, host="h", pid=1, device="cuda:0", version="t", job=None,
                           started_at=time.time(), stats={}, memory_used=0, memory_total=0,
                           models=[], allow=None)
    await workers.stopped("gpu:3")
    return {"quiet": quiet.job_id, "busy": busy.job_id, "gone": gone.job_id,
            "ahead": ahead.job_id}


def samples(text: str) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


async def test_metrics_api_and_hand_back_for_stuck_jobs(tmp_path, demo_models):
    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        async with w.http.get("/metrics") as r:
            calm = samples(await r.text())
        assert calm[("genbot_oldest_ahead_seconds", ())] == 0
        assert calm[("genbot_stalest_running_seconds", ())] == 0
        ids = await stick(w.queue)
        async with w.http.get("/metrics") as r:
            seen = samples(await r.text())
        assert HOUR <= seen[("genbot_oldest_ahead_seconds", ())] < HOUR + 60
        assert HOUR <= seen[("genbot_stalest_running_seconds", ())] < HOUR + 60
        assert seen[("genbot_stuck_jobs", (("state", "ahead"),))] == 1
        assert seen[("genbot_stuck_jobs", (("state", "running"),))] == 2  # quiet, and gone

        status, body = await w.call("GET", "/queue/leases", VIEWER)
        assert (status, body["error"]["code"]) == (403, "refused_role")
        status, body = await w.call("GET", "/queue/leases", ADMIN)
        assert status == 200 and body["stuck_after"] == 600 and body["stuck"] == 3
        listed = {j["id"]: (j["state"], j["holder"], j["holder_state"], j["why"])
                  for j in body["jobs"]}
        assert listed == {ids["quiet"]: ("running", "gpu:1", "idle", "quiet"),
                          ids["ahead"]: ("ahead", "gpu:1", "idle", "quiet"),
                          ids["gone"]: ("running", "gpu:3", "stopped", "holder_gone"),
                          ids["busy"]: ("running", "gpu:2", "idle", None)}
        assert body["jobs"][-1]["id"] == ids["busy"]  # the quietest first

        status, body = await w.call("POST", "/queue/hand-back", ALICE, json={"stuck": True})
        assert (status, body["error"]["code"]) == (403, "refused_role")
        status, body = await w.call("POST", "/queue/hand-back", ADMIN, json={})
        assert (status, body["error"]["code"]) == (422, "nothing_to_hand_back")
        status, body = await w.call("POST", "/queue/hand-back", ADMIN,
                                    json={"jobs": [ids["ahead"]]})
        assert (status, body) == (200, {"handed_back": [ids["ahead"]]})
        status, body = await w.call("POST", "/queue/hand-back", ADMIN, json={"stuck": True})
        assert (status, body) == (200, {"handed_back": sorted([ids["quiet"], ids["gone"]])})
        for name in ("quiet", "gone", "ahead"):
            job = await w.queue.job(ids[name])
            assert (job.status, job.attempts, job.lease_owner) == ("queued", 0, None), name
        assert (await w.queue.job(ids["busy"])).status == "running"  # alive: left alone
        audit = [(a.user, a.action, a.allowed) for a in await w.core.access.audit_log()]
        assert ("ops", "doctor", True) in audit and ("alice", "doctor", False) in audit
        async with w.http.get("/metrics") as r:
            after = samples(await r.text())
        assert after[("genbot_oldest_ahead_seconds", ())] == 0
        assert sum(v for (name, _), v in after.items() if name == "genbot_stuck_jobs") == 0


async def test_doctor_in_chat_lists_stuck_jobs_and_hands_them_back(tmp_path, demo_models):
    from tests.conftest import executor_config
    config = executor_config(tmp_path / "data", demo_models,
                             chat={"admins": ["test:BOSS"]})
    async with World(config) as w:
        (none,) = await w.send("/doctor", user="BOSS")
        assert none.text == "No job is leased now: nothing claimed ahead, nothing running."
        ids = await stick(w.queue)
        (refused,) = await w.send("/doctor", user="U1")
        assert refused.text.startswith("/doctor needs the admin role")
        (listed,) = await w.send("/doctor", user="BOSS")
        lines = listed.text.splitlines()
        assert lines[0].startswith("4 leased jobs, the quietest first; 3 look stuck (no sign "
                                   "of life for 10 min")
        assert f"job {ids['gone']} " in listed.text and "STUCK: its executor is gone" in \
            listed.text
        (busy,) = [line for line in lines if line.startswith(f"job {ids['busy']} ")]
        assert busy.endswith("no progress for 0.0 min")  # not stuck: no mark
        assert lines[-1].startswith("/doctor JOB … hands those jobs back")
        (handed,) = await w.send("/诊断 stuck", user="BOSS")  # its Chinese name: in Chinese
        assert handed.text.startswith("已交还 3 个任务（") and "不计尝试次数" in handed.text
        (again,) = await w.send(f"/doctor {ids['quiet']}", user="BOSS")
        assert again.text == "None of those jobs is leased now: nothing was handed back."
        (bad,) = await w.send("/doctor soon", user="BOSS")
        assert "soon" in bad.text  # a clear word on what it is not, no traceback


def test_genbot_queue_doctor_lists_then_hands_back(workdir, capsys):
    import asyncio

    async def setup() -> dict[str, int]:
        queue = await open_queue(cfg.load(env={}))
        try:
            return await stick(queue)
        finally:
            await queue.close()
    assert main(["queue", "doctor"]) == 0
    assert capsys.readouterr().out.strip() == \
        "no job is leased: nothing claimed ahead, nothing running"
    ids = asyncio.run(setup())
    assert main(["queue", "doctor"]) == 3  # something looks stuck: a script can alert
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["job", "batch", "row", "state", "quiet", "holder"]
    rows = {int(line.split()[0]): line for line in out[1:5]}
    assert "STUCK (quiet past 600 s)" in rows[ids["quiet"]]
    assert "ahead" in rows[ids["ahead"]] and "STUCK" in rows[ids["ahead"]]
    assert "gpu:3 (stopped)  STUCK (its executor is gone)" in rows[ids["gone"]]
    assert "STUCK" not in rows[ids["busy"]]
    assert out[-1].startswith("3 jobs look stuck: genbot queue doctor --hand-back")
    assert main(["queue", "doctor", "--hand-back", str(ids["ahead"])]) == 0
    assert capsys.readouterr().out.startswith(f"handed back 1 job: {ids['ahead']}; it runs "
                                              "again")
    assert main(["queue", "doctor", "--hand-back-stuck"]) == 0
    assert capsys.readouterr().out.startswith("handed back 2 jobs")
    assert main(["queue", "doctor"]) == 0
