"""Run bound workflows: the DAG of each job, node by node, with micro-batched generation.

Jobs of one batch share a template, so they run in lockstep: node by node, every job
at once. Ordinary ops run per job; a batched op (`generate`) runs once per group of
jobs whose inputs have the same shape (the op's `shape`), up to `max_batch` per call.
Each job keeps its own values, outputs and error: one job's bad input, or an
out-of-memory error, never fails the others.

A job's nodes up to its last `device` op (generate, upscale) are the GPU's part,
`run_device`; the rest — pillow ops, encoding and saving — is its `finish`, which the
executor runs on another thread while the GPU starts the next job.

A job's error is written for the person who sent the row: an op's OpError as it is;
any other exception names its node and the row's values that fed it, and the library's
own words (with the traceback) go to the executor's log. The machine's trouble (a full
disk, a store away: an OSError) is not a bug: the job is retried, and the log says it in
one line per episode (executor.told), not a traceback per job.

Runs in worker threads (it blocks on the GPU); the loop's `Control` is how it reports
progress and learns that a job should stop, between denoising steps. Neither call waits
on the database.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from executor.diffusers.ops import REGISTRY, Context, Op, OpError
from executor.engine import Control, Run
from executor.models.registry import ModelError
from executor.told import Told
from storage.names import shown
from templates.jobs import DiffusersJob, Step

log = logging.getLogger("genbot.executor")


@dataclass
class JobRun(Run):
    """A job in the runner: its bound graph and every value its nodes made so far."""
    job: DiffusersJob = field(kw_only=True)
    values: dict[str, Any] = field(default_factory=dict)  # "node.output" -> value
    used_models: list[str] = field(default_factory=list)
    oom_retried: bool = False


def split(job: DiffusersJob) -> int:
    """How many of a bound job's nodes are the GPU's part: up to its last device op.
    (Nodes are in the DAG's order, so everything after it depends on nothing the GPU
    has still to make.)"""
    return max((i + 1 for i, n in enumerate(job.nodes) if REGISTRY[n.op].device), default=0)


UNEXPECTED = "an unexpected error inside the op; the executor's log has the details"
MACHINE = "reading or writing a job's files"  # the kind of trouble executor.told counts
# The most of a pipeline call's time its previews may take (decoding the latents, making
# the pictures small): on a GPU a tiny VAE costs a fraction of this at the default interval;
# where decoding is dear next to a step (a CPU, a toy model) previews come less often.
PREVIEW_SHARE = 0.01


def fed_by(job: DiffusersJob, node: Step, limit: int = 3) -> str:
    """The row's values a node was given, for a one-line error: each parameter whose value
    is one of the node's inputs, or is written into one (a text like "{sku} sale"), as
    name "value" — quoted briefly, line breaks and control characters escaped. Pictures
    are named as the sheet named them."""
    given = [v for v in node.inputs.values() if not _is_ref(v)]
    found = []
    for name, value in job.params.items():
        if value is None or value == "" or isinstance(value, bool):
            continue
        if any(_fed(value, v) for v in given):
            quoted = shown(str(job.named.get(name, value)), 40).replace('"', '\\"')
            found.append(f'{name} "{quoted}"')
    more = len(found) - limit
    return ", ".join(found[:limit]) + (f" and {more} more" if more > 0 else "")


def _is_ref(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"@"}


def _fed(param: Any, given: Any) -> bool:
    """Whether a parameter's value is an input, is written into one, or is an item of one
    (a LoRA's name in a list)."""
    if type(param) is type(given) and param == given:
        return True
    if isinstance(given, (list, dict)):
        return any(_fed(param, v) for v in (given.values() if isinstance(given, dict)
                                            else given))
    # (a short value inside a longer text would match too much by chance)
    return isinstance(param, str) and isinstance(given, str) and len(param) >= 4 \
        and param in given


def _resolve(value: Any, values: dict[str, Any]) -> Any:
    if isinstance(value, dict):
        if set(value) == {"@"}:
            return values[value["@"]]
        return {k: _resolve(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, values) for v in value]
    return value


class Runner:
    def __init__(self, base: Context, control: Control, max_batch: int = 1,
                 on_oom: Callable[[], None] | None = None, previews: bool = False):
        self.base = base
        self.previews = previews  # [executor] preview_interval > 0: pictures while it runs
        # seconds of the device's calls, and of the previews made during them (their share)
        self.seconds: dict[str, float] = {"device": 0.0, "previews": 0.0}
        self.control = control
        self.max_batch = max_batch
        self.on_oom = on_oom or (lambda: None)  # frees memory (the worker clears the cache)
        self.told = Told(log)  # the machine's trouble (a full disk), once per episode

    def run_device(self, runs: list[JobRun]) -> None:
        """The GPU's part of each job (jobs of one template in lockstep)."""
        nodes = runs[0].job.nodes
        if any([n.id for n in r.job.nodes] != [n.id for n in nodes] for r in runs):
            for r in runs:  # different templates: no lockstep
                self.run_device([r])
            return
        for index in range(split(runs[0].job)):
            live = [r for r in runs if r.live]
            if not live:
                break
            spec = REGISTRY[nodes[index].op]
            for chunk in (self._chunks(spec, live, index) if spec.batched else [[r] for r in live]):
                self._call(chunk, index)
            self._check_stops(live)

    def finish(self, r: JobRun) -> None:
        """The rest of one job after its GPU part (pillow ops, encoding, saving), then its
        outputs: what each saving node gave, in template order."""
        nodes = r.job.nodes
        for index in range(split(r.job), len(nodes)):
            if not r.live:
                return
            self._call([r], index, device=False)
            self._check_stops([r])
        if r.live:
            ops = {n.id: REGISTRY[n.op] for n in nodes}
            r.outputs = [r.values[f"{nid}.{ops[nid].output}"] for nid in r.job.outputs]
            self.told.worked(MACHINE)

    def _check_stops(self, runs: list[JobRun]) -> None:
        for r in runs:
            if r.live and (reason := self.control.stop_reason(r)):
                r.stopped = reason

    def _chunks(self, spec: Op, live: list[JobRun], index: int) -> list[list[JobRun]]:
        assert spec.shape is not None
        groups: dict[Any, list[JobRun]] = {}
        for r in live:
            inputs = _resolve(r.job.nodes[index].inputs, r.values)
            groups.setdefault(spec.shape(inputs), []).append(r)
        return [g[i:i + self.max_batch] for g in groups.values()
                for i in range(0, len(g), self.max_batch)]

    def _call(self, chunk: list[JobRun], index: int, device: bool = True) -> None:
        for r in chunk:  # canceled (or timed out) while an earlier call ran
            if reason := self.control.stop_reason(r):
                r.stopped = reason
        chunk = [r for r in chunk if r.live]
        if not chunk:
            return
        node = chunk[0].job.nodes[index]
        spec = REGISTRY[node.op]
        batched = spec.batched
        ids = [r.id for r in chunk]
        # A job's own calls add to its list of models (save records them); a batched
        # call's list is copied to each of its jobs below.
        used = [] if batched else chunk[0].used_models
        ctx = replace(self.base, used_models=used, batch_id=chunk[0].batch_id,
                      job=chunk[0].job, on_step=self._on_step(chunk, node.id),
                      preview=self._on_preview(chunk) if spec.device else None)
        started = time.perf_counter()
        extra = {"batch": chunk[0].batch_id, "jobs": ids, "node": node.id, "op": node.op}
        log.info("node start", extra=extra)
        try:
            inputs = [_resolve(r.job.nodes[index].inputs, r.values) for r in chunk]
            results = spec.run(ctx, inputs) if batched else [spec.run(ctx, **inputs[0])]
        except Exception as e:  # noqa: BLE001 - attributed to the job(s) below
            self._failed(chunk, index, e, extra, device)
            return
        took = time.perf_counter() - started
        if device:
            self.seconds["device"] += took
        log.info("node end", extra={**extra, "seconds": round(took, 4)})
        for r, result in zip(chunk, results):
            if batched:
                r.used_models += used
            self._store(r, node.id, spec, result)

    @staticmethod
    def _store(r: JobRun, node: str, spec: Op, result: Any) -> None:
        if isinstance(result, dict):  # an op with several outputs
            r.values.update({f"{node}.{k}": v for k, v in result.items()})
        else:
            r.values[f"{node}.{spec.output}"] = result

    def _failed(self, chunk: list[JobRun], index: int, error: Exception, extra: dict,
                device: bool = True) -> None:
        from executor.diffusers.devices import out_of_memory
        # Off the GPU's thread the model cache is not this thread's to clear.
        oom = device and out_of_memory(error)
        if oom:
            log.warning("out of memory", extra=extra)
            self.on_oom()
        if len(chunk) > 1:
            # Attribute the failure: each job again on its own (at batch size 1).
            log.warning("batched call failed; running its jobs one by one: %s", error, extra=extra)
            for r in chunk:
                if oom:
                    r.oom_retried = True
                self._call([r], index)
            return
        r = chunk[0]
        if oom and not r.oom_retried:
            r.oom_retried = True
            self._call([r], index)
            return
        node = r.job.nodes[index]
        if r.stopped or self.control.stop_reason(r):
            r.stopped = r.stopped or self.control.stop_reason(r)
            return
        where = f"node {node.id} ({node.op})"
        if oom:
            r.error = f"{where}: out of memory, also at batch size 1"
        elif isinstance(error, (OpError, ModelError)):  # written for the person
            r.error = f"{where}: {error}"
        elif isinstance(error, OSError):  # the machine's, not the row's: a disk, a store
            r.error = f"{where}: {type(error).__name__}: {error}"
            r.retryable = True
            self.told.failed(MACHINE, error, job=r.id, expected=True)
            return
        else:  # a library's own words mean nothing to the person: the log has them
            fed = fed_by(r.job, node)
            r.error = (f"{where}: failed on this row's {fed} ({UNEXPECTED})" if fed
                       else f"{where}: failed ({UNEXPECTED})")
            # the same values would fail the same way again: not retried
            r.retryable = not isinstance(error, (ValueError, TypeError, LookupError,
                                                 ArithmeticError))
        log.error("job failed: %s; cause: %s: %s", r.error, type(error).__name__, error,
                  extra={**extra, "traceback": "".join(traceback.format_exception(error))})

    def _on_preview(self, runs: list[JobRun]) -> Callable[[Any, Any, int, int], None] | None:
        """Pictures of these runs forming, for those due one (none at all when the
        executor makes no previews: nothing is decoded then)."""
        if not self.previews:
            return None
        started, spent = time.perf_counter(), 0.0

        def preview(decode: Any, latents: Any, step: int, total: int) -> None:
            nonlocal spent
            now = time.perf_counter()
            if spent > PREVIEW_SHARE * (now - started):
                return  # previews so far cost more than their share: this step has none
            due = [i for i, r in enumerate(runs) if self.control.preview_due(r)]
            if not due:
                return
            try:
                pictures = decode(latents)
                for i in due:
                    if i < len(pictures):
                        self.control.preview(runs[i], pictures[i], step, total)
            except Exception as e:  # noqa: BLE001 - a preview never fails a job
                log.info("a preview could not be made: %s: %s", type(e).__name__, e)
            finally:  # (making the decoder, once, is not the previews' running cost)
                took = time.perf_counter() - now - getattr(decode, "take_setup", float)()
                spent += took
                self.seconds["previews"] += took
        return preview

    def _on_step(self, runs: list[JobRun], node: str) -> Callable[[int, int], bool]:
        def on_step(step: int, total: int) -> bool:
            self.control.step(list(runs), node, step, total)
            return all(self.control.stop_reason(r) for r in runs)
        return on_step
