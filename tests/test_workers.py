"""The worker registry on both backends: heartbeats, busy and idle, lost when silent."""

from __future__ import annotations

from storage.workers import Workers


async def test_heartbeats_describe_each_worker_and_silence_marks_it_lost(queue, clock):
    workers = Workers(queue.db, lost_after=30, clock=clock)
    born = clock() - 200  # when gpu1's process started
    await workers.beat("gpu1:11", host="gpu1", pid=11, device="cuda:0", version="0.1.0",
                       job=None, memory_total=80 * 2**30, models=["sdxl"], allow=["sdxl"],
                       started_at=born)
    await workers.beat("gpu2:22", host="gpu2", pid=22, device="cuda:1", version="0.1.0",
                       job=None, started_at=clock() - 100)  # as a worker says when it started
    clock.advance(10)
    await workers.beat("gpu1:11", host="gpu1", pid=11, device="cuda:0", version="0.1.0",
                       job=7, memory_total=80 * 2**30, memory_used=12 * 2**30,
                       models=["sdxl", "controlnet"], allow=["sdxl"], stats={"jobs": 3},
                       started_at=born)
    one, two = await workers.all()
    assert (one.id, one.state, one.job_id, one.models, one.allow) == \
        ("gpu1:11", "busy", 7, ["sdxl", "controlnet"], ["sdxl"])
    assert one.stats == {"jobs": 3} and one.memory_used == 12 * 2**30
    assert (one.started_at, one.seen_at) == (born, born + 210)
    assert (two.state, two.allow, two.models) == ("idle", None, [])
    assert two.seen_at - two.started_at == 100

    clock.advance(25)  # gpu2 silent for 35 s, gpu1 for 25 s
    assert [w.state for w in await workers.all()] == ["busy", "lost"]
    clock.advance(10)
    assert await workers.sweep() == ["gpu1:11"]
    assert await workers.sweep() == []  # once
    lost = [e for e in await queue.events_after(0) if e.kind == "worker_lost"]
    assert [(e.data["worker"], e.data["job"]) for e in lost] == [("gpu2:22", None),
                                                                      ("gpu1:11", 7)]
    # A lost worker that was only slow comes back with its next beat.
    await workers.beat("gpu2:22", host="gpu2", pid=22, device="cuda:1", version="0.1.0",
                       job=None)
    assert [w.state for w in await workers.all()] == ["lost", "idle"]


async def test_a_stopped_worker_says_so_and_is_forgotten_later(queue, clock):
    workers = Workers(queue.db, lost_after=30, clock=clock)
    await workers.beat("a:1", host="a", pid=1, device="cpu", version="0.1.0", job=3)
    await workers.stopped("a:1")
    (row,) = await workers.all()
    assert (row.state, row.job_id) == ("stopped", None)
    clock.advance(3600)
    assert await workers.sweep() == []  # stopped is not lost
    assert await workers.forget(clock() - 60) == 1
    assert await workers.all() == []
