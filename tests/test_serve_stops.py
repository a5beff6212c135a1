"""`genbot serve` stopped by SIGTERM at any moment of its start-up stops gracefully: a
rollout or `systemctl stop` does not wait for start-up to finish, and never kills it."""

from __future__ import annotations

import queue
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import PYTHON, free_port, python_env
from tests.fakes.service import get_json


class Serve:
    """`python -X importtime -m bot.cli serve` in its own folder, its output read line by
    line (importtime prints each module as its import completes: the moments before
    genbot has started anything become visible too)."""

    def __init__(self, folder: Path, command: str = "serve", **env: str):
        self.port = free_port()
        self.mark = uuid.uuid4().hex  # in every process it starts: none may outlive it
        # PYTHONFAULTHANDLER: a crash on the way out (-11) prints every thread's stack
        environment = python_env() | {"GENBOT_SERVICE_PORT": str(self.port),
                                      "SERVE_TEST_MARK": self.mark,
                                      "PYTHONFAULTHANDLER": "1"} | env
        environment.pop("GENBOT_CONFIG", None)
        self.proc = subprocess.Popen([PYTHON, "-X", "importtime", "-m", "bot.cli", command],
                                     cwd=folder, env=environment, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def wait_for(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.seen):
            assert time.monotonic() < deadline, f"never saw {text!r}:\n{self.output}"
            try:
                self.seen.append(self.lines.get(timeout=0.1))
            except queue.Empty:
                assert self.proc.poll() is None, f"exited early:\n{self.output}"

    def wait_for_healthz(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                status, _ = get_json(f"http://127.0.0.1:{self.port}/healthz")
                assert status == 200
                return
            except OSError:
                assert self.proc.poll() is None, f"exited early:\n{self.output}"
                assert time.monotonic() < deadline, "service did not come up"
                time.sleep(0.02)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        time.sleep(0.2)  # the reader thread takes the last lines
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return code

    @property
    def output(self) -> str:
        return "".join(line for line in self.seen if not line.startswith("import time:"))

    def survivors(self) -> list[str]:
        """Processes started by this service still running after it exited."""
        left = []
        for environ in Path("/proc").glob("[0-9]*/environ"):
            try:
                if f"SERVE_TEST_MARK={self.mark}".encode() in environ.read_bytes():
                    left.append(environ.parent.name)
            except OSError:  # gone meanwhile, or not ours to read
                continue
        return left


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["importing", "waiting for the database",
                                    "healthz first answers"])
def test_sigterm_at_any_moment_of_start_up_is_a_graceful_stop(tmp_path, moment):
    if moment == "waiting for the database":  # a PostgreSQL server not up yet
        serve = Serve(tmp_path, GENBOT_DATABASE_URL=f"postgresql://127.0.0.1:{free_port()}/x",
                      GENBOT_DATABASE_OPEN_WAIT="120")
        serve.wait_for("waiting up to 120 s for it")
    else:
        serve = Serve(tmp_path)
        if moment == "importing":  # genbot's own imports are under way, nothing started
            serve.wait_for("bot.i18n")
        else:
            serve.wait_for_healthz()
    try:
        code = serve.stop()
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    assert code == 0, serve.output
    assert "Traceback" not in serve.output
    if moment == "importing":
        assert "genbot: stopped by SIGTERM while starting" in serve.output
    elif moment == "waiting for the database":
        assert "asked to stop while starting" in serve.output
    else:
        assert "genbot stopping" in serve.output
    assert serve.survivors() == []


@pytest.mark.slow
def test_another_command_stopped_while_importing_ends_as_a_shell_says_sigterm(tmp_path):
    # Not a service: no graceful stop to count as done, so 143 (128 + SIGTERM). The stop
    # ends the process where it stands, raising nothing into whatever code was running.
    worker = Serve(tmp_path, "worker")
    worker.wait_for("bot.i18n")
    try:
        code = worker.stop()
    finally:
        if worker.proc.poll() is None:
            worker.proc.kill()
    assert code == 143, worker.output
    assert "genbot: stopped by SIGTERM\n" in worker.output
    assert "Traceback" not in worker.output
