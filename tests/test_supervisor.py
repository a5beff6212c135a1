"""The executor is a supervised child of `genbot serve`: killing it never takes the service
down, and its job runs exactly once more — at once, not when its lease would run out."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess

import pytest

from bot.supervisor import Supervisor
from storage.queue import Status, Submission, open_queue
from storage.workers import Workers
from tests.conftest import PYTHON, executor_config, free_port, python_env
from tests.fakes.jobs import example_jobs, with_generate
from tests.fakes.service import get_json, write_config


@pytest.mark.slow
async def test_sigkill_of_the_executor_leaves_the_service_up_and_the_job_runs_once_more(
        tmp_path, demo_models):
    data = tmp_path / "data"
    port = free_port()
    config_file = tmp_path / "genbot.toml"
    # A lease far longer than the test may take: the job must come back because the
    # supervisor saw its executor die, not because the lease ran out.
    write_config(config_file, data, port, lease=900.0)
    config = executor_config(data, demo_models, queue={"lease_seconds": 900.0,
                                                       "heartbeat_seconds": 0.5})
    service = subprocess.Popen([PYTHON, "-m", "bot.cli", "serve", "--config", str(config_file)],
                               env=python_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    queue = await open_queue(config)
    try:
        # Steps enough that it is still generating when killed, right after its first.
        job = with_generate((await example_jobs(config, "product_main"))[0], steps=16)
        batch = (await queue.enqueue(Submission("product_main", "test:alice", [job]))).batch_id
        job_id = (await queue.batch_jobs(batch))[0].id
        async with asyncio.timeout(120):  # the executor starts (torch import) and runs it
            while not any(e.kind == "progress" for e in await queue.events_after(0)):
                assert service.poll() is None
                await asyncio.sleep(0.1)
        first = (await queue.job(job_id)).lease_owner
        os.kill(int(first.rsplit(":", 1)[1]), signal.SIGKILL)

        assert get_json(f"http://127.0.0.1:{port}/healthz")[0] == 200  # the service is up
        async with asyncio.timeout(120):
            while (await queue.job(job_id)).status != Status.SUCCEEDED:
                assert service.poll() is None
                await asyncio.sleep(0.2)
        done = await queue.job(job_id)
        kinds = [e.kind for e in await queue.events_after(0)
                 if e.job_id == job_id and e.kind != "progress"]
        assert kinds == ["running", "queued", "running", "succeeded"]  # taken back once
        assert done.attempts == 2 and done.lease_owner != first
        assert len(done.outputs) == 1
    finally:
        await queue.close()
        service.send_signal(signal.SIGTERM)
        try:
            out, _ = service.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            service.kill()
            out, _ = service.communicate()
    assert service.returncode == 0, out
    assert "executor died; restarting" in out and "signal=SIGKILL" in out
    assert "the dead executor's job goes back to the queue" in out
    assert "Traceback" not in out


async def run_supervised(tmp_path, script: str, wait_for) -> Supervisor:
    """A Supervisor over a tiny Python child (a stand-in for the executor's exit codes)."""
    from storage import config as cfg
    child = tmp_path / "child.py"
    child.write_text(script)
    supervisor = Supervisor(cfg.from_dict({"service": {"restart_backoff_max": 0.2}}),
                            command=[PYTHON, str(child), str(tmp_path / "runs")])
    supervisor.start()
    async with asyncio.timeout(30):
        while not wait_for(supervisor):
            await asyncio.sleep(0.05)
    await supervisor.stop(grace=5)
    return supervisor


COUNTING_CHILD = """
import sys, pathlib
runs = pathlib.Path(sys.argv[1])
with open(runs, "a") as f:  # appending: a child killed mid-write never empties the count
    f.write("x")
sys.exit({code})
"""


async def test_a_recycled_or_dead_executor_is_started_again(tmp_path):
    for code in (75, 1, -9):
        script = COUNTING_CHILD.format(code=code) if code >= 0 else \
            "import os, signal, sys, pathlib\n" + COUNTING_CHILD.split("sys.exit")[0] + \
            "os.kill(os.getpid(), signal.SIGKILL)\n"
        (tmp_path / "runs").unlink(missing_ok=True)
        supervisor = await run_supervised(tmp_path, script, lambda s: s.restarts >= 3)
        assert len((tmp_path / "runs").read_text()) >= 3 and not supervisor.gave_up


async def test_an_executor_that_refuses_its_config_is_not_restarted(tmp_path):
    supervisor = await run_supervised(tmp_path, COUNTING_CHILD.format(code=2),
                                      lambda s: s.gave_up)
    assert (tmp_path / "runs").read_text() == "x" and supervisor.restarts == 0


async def test_stop_terminates_a_running_executor(tmp_path):
    supervisor = await run_supervised(
        tmp_path, "import time, sys, pathlib\npathlib.Path(sys.argv[1]).write_text('x')\n"
                  "time.sleep(600)\n", lambda s: (tmp_path / "runs").exists())
    assert supervisor.process.returncode == -signal.SIGTERM


@pytest.mark.slow
async def test_an_executor_whose_service_died_stops_instead_of_lingering(tmp_path, demo_models):
    data = tmp_path / "data"
    config_file = tmp_path / "genbot.toml"
    write_config(config_file, data, free_port())
    config = executor_config(data, demo_models)  # links the demo models into data/
    service = subprocess.Popen([PYTHON, "-m", "bot.cli", "serve", "--config", str(config_file)],
                               env=python_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        async with asyncio.timeout(60):
            while not (children := _children(service.pid)):
                await asyncio.sleep(0.2)
        executor = children[0]
        # The executor is up (torch imported, signal handlers and its watch on the service
        # set) once its registry row says idle.
        queue = await open_queue(config)
        try:
            async with asyncio.timeout(60):
                while not [w for w in await Workers.of(queue).all() if w.state == "idle"]:
                    assert service.poll() is None
                    await asyncio.sleep(0.1)
        finally:
            await queue.close()
        service.kill()
        service.communicate()
        async with asyncio.timeout(30):
            while os.path.exists(f"/proc/{executor}") and \
                    open(f"/proc/{executor}/stat").read().split()[2] != "Z":
                await asyncio.sleep(0.2)
    finally:
        if service.poll() is None:
            service.kill()


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found
