"""The `genbot` command: queue control from a shell, and `serve` answering /healthz."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import time

import pytest

from bot.cli import main, plugins
from storage import config as cfg
from storage.queue import NewJob, Priority, Submission, open_queue
from templates.jobs import decode
from tests.conftest import PYTHON, ROOT, free_port, python_env
from tests.fakes.jobs import finish_all
from tests.fakes.service import get_json

BOTTLE_BYTES = (ROOT / "examples" / "assets" / "bottle.png").read_bytes()


def seed(n=3, submitter="slack:U1", priority=Priority.NORMAL) -> int:
    async def go():
        queue = await open_queue(cfg.load(env={}))
        try:
            return (await queue.enqueue(Submission(
                "product_main", submitter, [NewJob(i, {}) for i in range(n)],
                priority=priority))).batch_id
        finally:
            await queue.close()
    return asyncio.run(go())


def run_cli(capsys, *argv) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_queue_status_pause_resume_cancel(workdir, capsys):
    batch = seed(3)
    seed(2, submitter="slack:U2", priority=Priority.URGENT)
    code, out = run_cli(capsys, "queue", "status")
    assert code == 0 and "queue: accepting and running jobs" in out
    lines = {line.split()[0]: line.split()[1:] for line in out.splitlines()[2:7]}
    assert lines["queued"] == ["2", "0", "3", "0", "5"]  # urgent high normal low total
    assert "average job: unknown" in out
    assert "queue drained: waits for an executor" in out  # none runs: no time promised

    assert run_cli(capsys, "queue", "pause")[1].startswith("paused")
    assert run_cli(capsys, "queue", "pause")[1].strip() == "already paused"
    code, out = run_cli(capsys, "queue", "status")
    assert "queue: PAUSED by cli:" in out
    assert "queue drained: starts when the queue is resumed" in out
    assert run_cli(capsys, "queue", "resume")[1].strip() == "resumed"

    code, out = run_cli(capsys, "queue", "cancel", "--batch", str(batch))
    assert out.strip() == "canceled 3 queued jobs; asked 0 running jobs to stop"
    code, out = run_cli(capsys, "queue", "cancel", "--all")
    assert out.startswith("canceled 2 queued jobs")
    code, out = run_cli(capsys, "queue", "status")
    canceled = [line for line in out.splitlines() if line.startswith("canceled")][0]
    assert canceled.split()[-1] == "5"


def test_bad_config_is_one_line_not_a_traceback(workdir, capsys):
    (workdir / "config.toml").write_text("[queue]\nmax_atempts = 3\n")
    assert main(["queue", "status"]) == 2
    err = capsys.readouterr().err
    assert err == ("genbot: config.toml: unknown key [queue] max_atempts — "
                   "did you mean max_attempts?\n")


def test_unreachable_database_is_reported_plainly(workdir, capsys, monkeypatch):
    monkeypatch.setenv("GENBOT_DATABASE_URL", "postgres://nobody:secret@127.0.0.1:1/none")
    assert main(["queue", "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("genbot: cannot open database postgres://nobody:***@127.0.0.1:1/none")
    assert "secret" not in err and "Traceback" not in err


@pytest.mark.slow
def test_serve_runs_on_defaults_answers_healthz_and_stops_on_sigterm(tmp_path):
    port = free_port()
    env = python_env() | {"GENBOT_SERVICE_PORT": str(port)}
    env.pop("GENBOT_CONFIG", None)
    proc = subprocess.Popen([PYTHON, "-m", "bot.cli", "serve"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = get_json(f"http://127.0.0.1:{port}/healthz")
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                assert time.monotonic() < deadline, "service did not come up"
                time.sleep(0.1)
        assert status == 200
        age = body.pop("age")  # seconds since the summary it answers from
        assert body == {"status": "ok", "paused": False, "queued": 0, "running": 0}
        assert 0 <= age < 60
        assert (tmp_path / "data" / "genbot.sqlite3").is_file()  # SQLite under ./data
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert f"genbot serving on http://127.0.0.1:{port}" in out and "Traceback" not in out
        assert ("templates: edit_instruction, material_swap, poster_zh, product_main, "
                "social_thumb") in out  # checked at start
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_serve_on_a_busy_port_says_so(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = python_env() | {"GENBOT_SERVICE_PORT": str(port)}
        done = subprocess.run([PYTHON, "-m", "bot.cli", "serve"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"genbot: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_lists_the_commands():
    done = subprocess.run([PYTHON, "-m", "bot.cli", "--help"], capture_output=True, text=True,
                          env=python_env(), cwd=ROOT)
    assert done.returncode == 0
    for command in ("serve", "check-config", "db", "queue"):
        assert command in done.stdout


# --- templates ---------------------------------------------------------------------------

def test_templates_show_and_broken_ones(workdir, capsys):
    code, out = run_cli(capsys, "templates")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == [
        "edit_instruction", "material_swap", "poster_zh", "product_main", "social_thumb"]
    assert run_cli(capsys, "template", "list") == (code, out)  # the same command
    code, out = run_cli(capsys, "template", "show", "product_main")
    assert code == 0 and "sku" in out and "货号" in out and "1..100" in out
    assert "output files: {sku}/{row}.png" in out
    folder = workdir / "mine"
    folder.mkdir()
    (folder / "oops.json").write_text('{"name": "oops", "nodes": {"a": {"op": "nope"}}}')
    (workdir / "config.toml").write_text('[templates]\ndir = "mine"\n')
    assert main(["templates"]) == 1
    err = capsys.readouterr().err
    assert "BROKEN" in err and "oops.json: nodes.a.op: unknown op" in err


def test_template_example_writes_a_sheet_that_reads_back(workdir, capsys):
    from bot.intake.sheets import read_sheet
    code, out = run_cli(capsys, "template", "example", "social_thumb", "-o", "x.xlsx",
                        "--lang", "zh")
    assert code == 0 and out.splitlines() == [
        "wrote x.xlsx",
        "and the pictures its rows name, beside it: assets/bottle.png, assets/chair.png",
        "try it: genbot run social_thumb x.xlsx"]
    sheet = read_sheet("x.xlsx", (workdir / "x.xlsx").read_bytes(), max_unpacked_bytes=2**26)
    assert sheet.headers[:3] == ["图片", "标题", "比例"] and len(sheet.rows) == 2
    import python_calamine
    names = python_calamine.CalamineWorkbook.from_path(str(workdir / "x.xlsx")).sheet_names
    assert names == ["数据", "说明"]


@pytest.mark.parametrize("name", ["product_main", "material_swap", "social_thumb"])
def test_an_example_sheet_runs_as_handed_out_from_any_folder(workdir, capsys, name):
    """The sheet names pictures (assets/bottle.png …) that exist nowhere but in the repo's
    examples/: `template example` writes them beside the sheet, the person's own kept."""
    elsewhere = workdir / "far" / "away"
    elsewhere.mkdir(parents=True)
    own = elsewhere / "assets" / "chair.png"
    if name == "material_swap":
        own.parent.mkdir()
        own.write_bytes(b"mine")
    code, out = run_cli(capsys, "template", "example", name, "-o", str(elsewhere / "s.xlsx"))
    assert code == 0
    if name == "material_swap":
        assert own.read_bytes() == b"mine" and f"kept the pictures already there: {own}" in out
        own.unlink()
        code, out = run_cli(capsys, "template", "example", name, "-o", str(elsewhere / "s.xlsx"))
    pictures = sorted(p.name for p in (elsewhere / "assets").iterdir())
    assert pictures == {"product_main": ["bottle.png"], "material_swap": ["chair.png"],
                        "social_thumb": ["bottle.png", "chair.png"]}[name]
    code, out = run_cli(capsys, "validate", name, str(elsewhere / "s.xlsx"))
    assert code == 0 and out.strip() == f"s.xlsx: all 2 rows are valid for {name}."


def test_an_example_sheet_without_its_pictures_uses_genbots_and_says_so(workdir, capsys):
    """genbot's own example sheet sent alone (chat, or its pictures lost): the names the
    template's examples give are genbot's drawings — said in the report."""
    from bot.intake.writer import write_example
    from templates.loader import load_templates
    templates, _ = load_templates(ROOT / "templates" / "shipped")
    (workdir / "s.xlsx").write_bytes(write_example(templates["social_thumb"]))
    code, out = run_cli(capsys, "validate", "social_thumb", "s.xlsx")
    assert code == 0 and out.splitlines() == [
        "s.xlsx: all 2 rows are valid for social_thumb.",
        "used genbot's example pictures for assets/bottle.png, assets/chair.png (no file of "
        "that name was sent or is in the assets folder): send your own pictures to replace "
        "them"]


def test_a_persons_sheet_never_runs_on_genbots_example_pictures(workdir, capsys):
    """Issue 42, item 5: a sheet of one's own naming assets/bottle.png without the file is
    refused at its cell — not run on genbot's demo bottle; the file there is used."""
    (workdir / "s.csv").write_text("image,title\nassets/bottle.png,Hi\n", encoding="utf-8")
    code, out = run_cli(capsys, "validate", "social_thumb", "s.csv")
    assert code == 1 and out.splitlines()[1] == (
        f'row 2, column "image": no image "assets/bottle.png" beside the sheet ({workdir}) or '
        f"in the assets folder ({workdir / 'assets'}): put it in one of them, or fix "
        "the name"), out
    assert "example pictures" not in out
    (workdir / "assets").mkdir()
    (workdir / "assets" / "bottle.png").write_bytes(BOTTLE_BYTES)
    code, out = run_cli(capsys, "validate", "social_thumb", "s.csv")  # the file there wins
    assert code == 0 and out.strip() == "s.csv: all 1 rows are valid for social_thumb."


def test_validate_reports_like_the_bot(workdir, capsys):
    code, out = run_cli(capsys, "validate", "product_main",
                        str(ROOT / "examples" / "product_main.xlsx"))
    assert code == 0 and out.strip() == "product_main.xlsx: all 2 rows are valid for product_main."
    bad = workdir / "bad.csv"
    bad.write_text("sku,prompt,product_image,steps\nA,p,nothere.png,500\n", encoding="utf-8")
    code, out = run_cli(capsys, "validate", "product_main", str(bad), "--lang", "zh")
    assert code == 1
    assert out.splitlines() == [
        "bad.csv：1 行中有 1 行有问题，未提交任何任务。",
        f"第 2 行，“product_image”列：找不到图片“nothere.png”：表格所在目录（{workdir}）和素材目录"
        f"（{workdir / 'assets'}）中都没有，请放入其中之一，或改正文件名",
        "第 2 行，“steps”列：500 大于最大值 100"]
    assert not (workdir / "data").exists()  # validating stores nothing
    code, out = run_cli(capsys, "validate", "product_main", str(bad), "--lang", "zh-CN")
    assert code == 1 and out.startswith("bad.csv：")  # (any tag of an offered language)
    assert main(["validate", "product_main", str(bad), "--lang", "fr"]) == 2
    assert "--lang fr: not a language offered here (en, zh" in capsys.readouterr().err


@pytest.mark.parametrize("content, says", [
    (b"[" * 100_000 + b"]" * 100_000, "wf.json: line 1 column 65: nested more than 64 deep"),
    (b'{"3": {"class_type": "K\xffS"}}',
     "wf.json: line 1: not UTF-8 text (byte 0xff at offset 23): save it as UTF-8"),
])
def test_template_import_of_a_hostile_file_exits_with_one_line(tmp_path, content, says):
    """The real command in its own process (its own stack and recursion limit): exit 1, one
    line on stderr, nothing written (docs/comfyui.md)."""
    (tmp_path / "wf.json").write_bytes(content)
    (tmp_path / "config.toml").write_text('[templates]\ndir = "t"\n')
    env = python_env()
    env.pop("GENBOT_CONFIG", None)
    done = subprocess.run([PYTHON, "-m", "bot.cli", "template", "import", "wf.json", "--name",
                           "w"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (1, "", f"genbot: {says}\n")
    assert not (tmp_path / "t").exists()


def test_unknown_template_lists_the_known_ones(workdir, capsys):
    with pytest.raises(SystemExit) as e:
        main(["template", "show", "prodct_main"])
    assert "no template 'prodct_main'" in str(e.value) and "product_main" in str(e.value)


def test_validate_takes_any_cell_text_as_an_image_name(workdir, capsys):
    """A cell longer than a file name can be, or holding a NUL, is that cell's problem."""
    bad = workdir / "long.csv"
    bad.write_text("sku,prompt,product_image\nA,p," + "x" * 5000 + "\nB,p,a/" + "y" * 300
                   + ".png\n", encoding="utf-8")
    code, out = run_cli(capsys, "validate", "product_main", str(bad))
    assert code == 1 and "Traceback" not in out
    lines = out.splitlines()
    assert lines[1].startswith('row 2, column "product_image": "xxxx') \
        and "(5,000 characters)" in lines[1] and "is not a file name" in lines[1]
    assert lines[2].startswith('row 3, column "product_image":')


def test_a_misspelled_template_gets_a_did_you_mean(workdir, capsys):
    with pytest.raises(SystemExit) as e:
        main(["validate", "social_thumbs", str(ROOT / "examples" / "social_thumb.xlsx")])
    assert "no template 'social_thumbs' (did you mean social_thumb?)" in str(e.value)


def test_canceling_a_batch_that_does_not_exist_says_so(workdir, capsys):
    assert main(["queue", "cancel", "--batch", "999"]) == 1
    assert capsys.readouterr().err.strip() == "genbot: There is no batch 999."


def test_check_config_checks_that_model_paths_exist(workdir, capsys, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text(f'[service]\ndata_dir = "{tmp_path / "d"}"\n'
                      f'[models]\nsdxl = "{tmp_path / "nowhere"}"\n')
    assert main(["check-config", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert "config has problems" in err and "[models] sdxl:" in err and "nowhere" in err


# --- commands by entry point (bot.cli.plugins) --------------------------------------------

class FakePoint:
    """An entry point of the `genbot.commands` group, loading what it was given."""

    def __init__(self, name, obj):
        self.name, self.value = name, f"tests.fake:{name}"
        self.obj = obj

    def load(self):
        if isinstance(self.obj, Exception):
            raise self.obj
        return self.obj


@pytest.fixture
def installed(monkeypatch):
    """Make these the group's entry points (none: a machine with the bot alone)."""
    def install(*points):
        monkeypatch.setattr(plugins, "entry_points",
                            lambda group: list(points) if group == plugins.GROUP else [])
        plugins.installed.cache_clear()
    yield install
    plugins.installed.cache_clear()


def help_text(capsys) -> str:
    with pytest.raises(SystemExit):
        main(["--help"])
    return capsys.readouterr().out


def test_the_executors_commands_come_from_its_entry_point(capsys):
    from executor import cli
    plugins.installed.cache_clear()
    assert [(p.name, p.register, p.checks) for p in plugins.installed()] == [
        ("executor", cli.register, cli.checks)]
    out = help_text(capsys)
    assert "worker" in out and "models" in out


def test_without_the_executor_the_bots_commands_still_work(workdir, capsys, installed):
    installed()
    out = help_text(capsys)
    assert "serve" in out and "templates" in out and "worker" not in out and "models" not in out
    assert main(["templates"]) == 0 and "social_thumb" in capsys.readouterr().out
    with pytest.raises(SystemExit):  # argparse: invalid choice
        main(["worker"])
    assert "invalid choice: 'worker'" in capsys.readouterr().err
    (workdir / "c.toml").write_text('[models]\nsdxl = "./nowhere"\n')  # nobody to check it
    assert main(["check-config", "--config", "c.toml"]) == 0
    assert capsys.readouterr().out.startswith("config OK (")


def test_a_plugin_that_does_not_load_is_named_and_left_out(workdir, capsys, installed):
    from executor import cli
    installed(FakePoint("broken", ModuleNotFoundError("No module named 'gone'")),
              FakePoint("executor", cli))
    assert main(["templates"]) == 0
    err = capsys.readouterr().err
    assert err.strip() == ("genbot: leaving out the commands of broken (tests.fake:broken): "
                           "ModuleNotFoundError: No module named 'gone'")
    assert "worker" in help_text(capsys)


def test_a_plugins_command_and_checks(workdir, capsys, installed):
    import types

    def register(subparsers, common):
        hello = subparsers.add_parser("hello", parents=[common], help="say hello")
        hello.set_defaults(func=lambda args: print(f"hello, {args.config}") or 3)

    def checks(config):
        return [f"[extra] from {config.source}"]

    installed(FakePoint("extra", types.SimpleNamespace(register=register, checks=checks)),
              FakePoint("clash", types.SimpleNamespace(register=lambda sub, common:
                                                       sub.add_parser("serve"))))
    assert main(["hello", "--config", "x.toml"]) == 3
    out = capsys.readouterr()
    assert out.out == "hello, x.toml\n"
    assert "leaving out the commands of clash (tests.fake:clash): ArgumentError:" in out.err
    assert main(["check-config"]) == 1
    assert "  [extra] from built-in defaults" in capsys.readouterr().err.splitlines()


# --- genbot job: acting on a finished image over the REST API ------------------------------

async def finished_row(w) -> int:
    """A product_main row of alice's, finished as an executor would: its job id."""
    from bot.app.application import Accepted, SubmitOptions
    from bot.app.permissions import Who
    from bot.intake.check import SheetFile

    async def pictures(name: str) -> bytes | None:
        return BOTTLE_BYTES

    done = await w.app.submit(Who("api", "alice", "api"), "product_main", SheetFile(
        "p.csv", b"sku,product_image,prompt,steps\nA1,bottle.png,a bottle,4\n"), pictures,
        SubmitOptions(wait_for_executor=True))
    assert isinstance(done, Accepted)
    (job,) = await finish_all(w.app, done.batch_id)
    return job.id


async def test_genbot_job_again_keep_and_lineage_talk_to_the_api(tmp_path, demo_models, capsys):
    from bot.app.permissions import Who
    from tests.fakes.api import ADMIN, ALICE, BOB, ApiWorld, api_config

    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        parent = await finished_row(w)

        async def genbot(*argv: str, token: str = ALICE) -> tuple[int, str, str]:
            code = await asyncio.to_thread(main, ["job", *argv, "--server", w.url,
                                                  "--token", token])
            out, err = capsys.readouterr()
            return code, out, err

        code, out, err = await genbot("again", str(parent), "-n", "2", "--idempotency-key", "k")
        assert (code, out) == (0, f"batch 2: again of job {parent} -> jobs 2, 3\n"), err
        code, out, _ = await genbot("again", str(parent), "-n", "2", "--idempotency-key", "k")
        assert out == f"batch 2: again of job {parent} -> jobs 2, 3 " \
                      "(asked before: nothing new queued)\n"
        assert (await genbot("keep", str(parent)))[1] == f"job {parent}: kept\n"
        code, out, _ = await genbot("lineage", "3")
        assert out.splitlines() == [f"job 3 (batch 2, row 2): again of job {parent}, queued, "
                                    "not rated",
                                    f"made from: job {parent} (batch 1, succeeded, kept)",
                                    "children: -"]
        code, out, _ = await genbot("lineage", str(parent))
        assert out.splitlines()[1:] == ["made from: -", "children: job 2 (again, batch 2, "
                                        "queued), job 3 (again, batch 2, queued)"]
        assert (await genbot("unkeep", str(parent)))[1] == f"job {parent}: not rated\n"
        code, out, err = await genbot("review", str(parent), "rejected", "--note", "cut off")
        assert (code, out) == (0, f"job {parent}: rejected: cut off\n"), err
        assert (await genbot("stars", str(parent), "4"))[1] == f"job {parent}: ★★★★\n"
        assert (await genbot("signoff", "1"))[1] == "batch 1: signed off by api:alice " \
            "(1 rejected)\n"
        code, out, err = await genbot("review", str(parent), "approved")
        assert code == 1 and "was signed off by api:alice" in err
        await w.app.reopen(Who("api", "ops", "api"), 1)  # (an admin: on with the rest)
        # Refused: one line, as chat words it, and exit 1.
        for argv, token, says in ((("again", "99"), ALICE, "There is no job 99."),
                                  (("again", str(parent)), BOB, "submitted by api:alice"),
                                  (("edit", str(parent), "steps=many"), ALICE,
                                   'steps: "many" is not a whole number'),
                                  (("reject", "3"), ALICE, "")):
            code, out, err = await genbot(*argv, token=token)
            assert (code, out) == (1, ""), (argv, out, err)
            assert says in err and err.count("\n") == 1, err

        # genbot submit sweeps: --vary once per axis, --seeds.
        sheet = tmp_path / "p.csv"
        sheet.write_bytes(b"sku,product_image,prompt\nA1,assets/bottle.png,a bottle\n")
        (tmp_path / "assets").mkdir()  # sent with the sheet: the files beside it it names
        (tmp_path / "assets" / "bottle.png").write_bytes(BOTTLE_BYTES)
        code = await asyncio.to_thread(main, [
            "submit", "product_main@1", str(sheet), "--vary", "steps=1..3", "--vary",
            "CFG=3,5", "--seeds", "2", "--wait-for-executor", "--server", w.url,
            "--token", ALICE])
        out, err = capsys.readouterr()
        assert code == 0 and out.startswith("batch 3: 12 product_main@1 jobs"), out + err
        # admins reorder what waits: a batch's jobs, one job; others are refused
        assert (await genbot("move", "b3", "back", token=ADMIN))[1] == \
            "batch 3: 12 waiting jobs moved to the back\n"
        assert (await genbot("move", "5", "front", token=ADMIN))[1] == \
            "job 5: 1 waiting job moved to the front\n"
        code, out, err = await genbot("move", "b3", "front")
        assert code == 1 and not out and "admin" in err, err
        # an instruction: the image itself changed on an edit model
        code, out, err = await genbot("edit", str(parent), "--instruction", "把背景换成海滩",
                                      "--model", "flux_kontext")
        assert (code, out) == (0, f"batch 4: edit of job {parent} -> job 16\n"), err
        assert (await genbot("edit", str(parent)))[0] == 2  # neither changes nor a sentence
        await w.app.rate(Who("api", "alice", "api"), parent, "keep")
        code, out, err = await genbot("upscale", "b1")  # every kept image of batch 1
        assert (code, out) == (0, "batch 5: upscale of the 1 kept image of batch 1 -> "
                                  "job 17\n"), err


async def test_genbot_job_repaint_sends_a_mask_file_and_extend_a_shape(tmp_path, demo_models,
                                                                       capsys):
    from tests.fakes.api import ALICE, ApiWorld, api_config

    async with ApiWorld(api_config(tmp_path, demo_models)) as w:
        parent = await finished_row(w)

        async def genbot(*argv: str) -> tuple[int, str, str]:
            code = await asyncio.to_thread(main, ["job", *argv, "--server", w.url,
                                                  "--token", ALICE])
            out, err = capsys.readouterr()
            return code, out, err

        # a region repainted by a mask file, the canvas extended to a shape
        from PIL import Image
        mask = Image.new("L", (64, 48), 0)
        mask.paste(255, (0, 0, 20, 20))
        mask.save(tmp_path / "mask.png")
        code, out, err = await genbot("repaint", str(parent), "--mask",
                                      str(tmp_path / "mask.png"), "-i", "a red scarf")
        assert (code, out) == (0, f"batch 2: repaint of job {parent} -> job 2\n"), err
        code, out, err = await genbot("extend", str(parent), "--aspect", "9:16", "--left", "8")
        assert (code, out) == (0, f"batch 3: extend of job {parent} -> job 3\n"), err
        step = decode((await w.app.job(3)).workflow).nodes[0].inputs
        assert (step["aspect"], step["left"]) == ("9:16", 8)
        code, out, err = await genbot("repaint", str(parent))  # where to repaint: asked
        assert (code, err) == (2, "genbot: give --mask FILE (white where to repaint) or "
                                  "--region WORDS\n")
        code, out, err = await genbot("repaint", str(parent), "--region", "the bottle")
        assert code == 1 and "No model here finds a region named in words" in err, err
        code, out, err = await genbot("extend", str(parent))
        assert (code, "Say how to extend" in err) == (1, True), err


# --- webhooks ----------------------------------------------------------------------------

def test_webhooks_list_test_redeliver_enable_and_a_new_secret(workdir, capsys):
    """`genbot webhooks` on this machine's queue: a test sent at once, from the command
    line, to an endpoint that takes it and to one that is down."""
    import base64
    import http.server
    import threading

    class Taker(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Taker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, secret = run_cli(capsys, "webhooks", "secret")
        secret = secret.strip()
        assert code == 0 and len(base64.b64decode(secret.removeprefix("whsec_"))) == 32
        (workdir / "config.toml").write_text(
            f'[[webhooks]]\nname = "ok"\nurl = "http://127.0.0.1:{server.server_port}/h"\n'
            f'secret = "{secret}"\ndescription = "takes everything"\n\n'
            f'[[webhooks]]\nname = "down"\nurl = "http://127.0.0.1:9/h"\nsecret = "{secret}"\n'
            'events = ["batch.finished"]\n')
        code, out = run_cli(capsys, "webhooks", "list")
        assert code == 0 and "ok " in out and "down " in out and "no deliveries yet" in out
        assert "events: batch.finished;" in out and "callbacks are signed with: whsec_" in out
        code, out = run_cli(capsys, "webhooks", "test", "ok")
        assert code == 0 and "webhook.test" in out and "sent (HTTP 204)" in out
        sent = int(out.split()[0])
        code, out = run_cli(capsys, "webhooks", "test", "down")
        assert code == 1 and "pending, next try" in out and "last error:" in out
        code, out = run_cli(capsys, "webhooks", "deliveries")
        assert code == 0 and len([ln for ln in out.splitlines() if "webhook.test" in ln]) == 2
        code, out = run_cli(capsys, "webhooks", "redeliver", str(sent))
        assert code == 0 and "2 tries" in out
        assert run_cli(capsys, "webhooks", "enable", "ok")[1].strip() == \
            "ok: was enabled already"
        assert main(["webhooks", "test", "nope"]) == 1
        assert "no webhook endpoint nope" in capsys.readouterr().err
    finally:
        server.shutdown()
