"""No job state and no image action is spelled out in product code: each is named through
its registry (storage.states, templates.actions), so adding one is the few-file change
docs/architecture.md describes, never a hunt. Words that only look like one (a sweep's
`vary`, the `upscale` op, a webhook delivery that `failed`) are listed below with why;
an entry that no longer matches anything fails too, so the list stays true."""

from __future__ import annotations

import ast
import io
import tokenize
from collections import Counter

from storage.states import Status
from templates.actions import ACTIONS
from tests.conftest import ROOT

# Where each vocabulary lives (and migrations, which mean the same thing forever).
REGISTRIES = {"storage/states.py", "templates/actions.py", "bot/messages.py"}
PRODUCT = ("bot", "executor", "templates", "storage")

# (file, word): why it is not the state or action of that name.
HOMONYMS = {
    ("templates/channels.py", "extend"): "a channel file's fit (the canvas grown to its "
                                         "shape), a word of the channels TOML",
    ("bot/app/application.py", "vary"): "a sweep's axes (/gen --vary)",
    ("bot/chat/commands.py", "vary"): "a sweep's axes (/gen --vary)",
    ("bot/client.py", "vary"): "a sweep's axes, as a form field",
    ("bot/web/batches.py", "vary"): "a sweep's axes, as a form field",
    ("bot/web/uploads.py", "vary"): "a sweep's axes, as a form field",
    ("bot/web/batches.py", "queued"): "an HTTP answer's description (201 queued)",
    ("bot/web/iterate.py", "queued"): "an HTTP answer's description (201 queued)",
    ("bot/chat/commands.py", "canceled"): "a message code",
    ("bot/chat/commands.py", "failed"): "a webhook delivery state",
    ("bot/chat/notifier.py", "failed"): "a progress message's field and an outbox key",
    ("bot/cli/webhooks.py", "failed"): "a webhook delivery state",
    ("bot/web/webhooks.py", "failed"): "a webhook delivery state",
    ("bot/webhooks/delivery.py", "failed"): "a webhook delivery's outcome",
    ("bot/web/metrics.py", "running"): "a column of the genbot_placement view",
    ("storage/records.py", "running"): "a column of the genbot_placement view",
    ("executor/engine.py", "canceled"): "why a run stops (executor.engine.Stop)",
    ("executor/loop.py", "canceled"): "the error a canceled job records",
    ("executor/models/families.py", "upscale"): "a model family and its kind",
    ("executor/models/registry.py", "upscale"): "a model's kind",
    ("templates/signatures.py", "upscale"): "the upscale op",
    ("templates/signatures.py", "edit"): "the edit op (an instruction edit) and its mode",
    ("templates/families.py", "edit"): "a family's mode (an instruction edit)",
    ("executor/diffusers/ops/diffusion.py", "edit"): "the edit op's pipeline mode",
}


def words() -> set[str]:
    actions = set(ACTIONS) | {alias for spec in ACTIONS.values() for alias in spec.aliases}
    return {s.value for s in Status} | actions


def spelled_out() -> Counter[tuple[str, str]]:
    """Every string literal in product code that is exactly a state or an action."""
    wanted, found = words(), Counter[tuple[str, str]]()
    for root in PRODUCT:
        for path in sorted((ROOT / root).rglob("*.py")):
            name = path.relative_to(ROOT).as_posix()
            if name in REGISTRIES or "migrations" in path.parts:
                continue
            source = io.StringIO(path.read_text(encoding="utf-8"))
            for token in tokenize.generate_tokens(source.readline):
                if token.type != tokenize.STRING:
                    continue
                try:
                    value = ast.literal_eval(token.string)
                except (ValueError, SyntaxError):  # an f-string's parts
                    continue
                if isinstance(value, str) and value in wanted:
                    found[name, value] += 1
    return found


def test_no_state_or_action_is_spelled_out_outside_its_registry():
    found = spelled_out()
    unexplained = sorted(set(found) - set(HOMONYMS))
    assert unexplained == [], (
        f"{unexplained}: name a state as storage.states.Status.X and an action through "
        "templates.actions.ACTIONS; a word that only looks like one goes in HOMONYMS, "
        "with why")
    assert sorted(set(HOMONYMS) - set(found)) == [], "HOMONYMS lists what is gone"


def test_the_check_finds_a_state_spelled_out(tmp_path, monkeypatch):
    """(The test above can fail: a file that compares with "succeeded" is found.)"""
    import tests.test_vocabulary_literals as me
    (tmp_path / "bot").mkdir()
    (tmp_path / "bot" / "x.py").write_text('done = job.status == "succeeded"\n')
    monkeypatch.setattr(me, "ROOT", tmp_path)
    assert me.spelled_out() == Counter({("bot/x.py", "succeeded"): 1})



# Words app.js spells that only look like a state or an action, with why.
JS_HOMONYMS = {"vary": "a sweep's axes: the submit form's field (POST /batches `vary`)"}


def test_the_dashboard_names_no_state_or_action():
    script = (ROOT / "bot" / "web" / "static" / "app.js").read_text(encoding="utf-8")
    spelled = sorted({w for w in words() if f'"{w}"' in script or f"'{w}'" in script})
    assert [w for w in spelled if w not in JS_HOMONYMS] == [], \
        f"app.js spells out {spelled}: read them from GET /vocabulary"
    assert set(JS_HOMONYMS) <= set(spelled), "a homonym no longer spelled: drop it"
