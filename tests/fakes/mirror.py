"""A new image action, "mirror" (the parent's image flipped left to right), written as the
recipe in docs/architecture.md says — each block below is what one product file would
gain — so tests/test_new_action.py can prove every front picks it up from the tables alone.
Imported before anything else of genbot's in a process of its own."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps

from bot import messages  # 4. bot/messages.py: its words (and their catalogs)
from bot.i18n import N_
from executor.diffusers.ops import base  # 3. executor/diffusers/ops/image.py: the op
from templates import actions, signatures  # 1. templates/actions.py, 2. templates/signatures.py
from templates.binding import safe_output_name
from templates.jobs import BoundJob, DiffusersJob, Step
from templates.size_rules import Same

# 2. templates/signatures.py: the op's signature, with its size rule
signatures.OPS["mirror"] = signatures.Signature(
    "mirror", "Flip left to right.", {"image": signatures.Input("image")},
    {"image": "image"}, (Same(),))


# 3. executor/diffusers/ops/image.py
@base.op()
def mirror(ctx: base.Context, image: Any) -> Image.Image:
    return ImageOps.mirror(ctx.image(image))


# 1. templates/actions.py: the derive function and the spec
def _mirror(t: Any, parent: BoundJob, ask: actions.Ask, image: str | None) -> BoundJob:
    assert image is not None
    name = safe_output_name(f"{image.rsplit('/', 1)[-1].rsplit('.', 1)[0]}_mirror",
                                    "png")
    return DiffusersJob(
        template=t.name, row=parent.row, params=dict(parent.params), named=dict(parent.named),
        version=parent.version, revision=parent.revision,
        nodes=[Step("mirror", "mirror", {"image": image}),
               Step("save", "save", {"image": {"@": "mirror.image"}, "name": name,
                                     "format": "png"})],
        outputs={"save": name})


actions.ACTIONS["mirror"] = actions.ActionSpec("mirror", _mirror, aliases=("镜像",), icon="🪞",
                                               uses_image=True)

# 4. bot/messages.py: the English …
messages.CATALOG.update([
    N_("verb_mirror", "Mirror"),
    N_("help_mirror", "the image flipped left to right"),
    N_("about_mirror", "the image flipped left to right"),
])
# … and bot/locales/zh_Hans/LC_MESSAGES/genbot.po (python -m bot.i18n adds the entries; a
# translator fills them in) — here a catalog of its own, which a config's [i18n]
# locales_dir puts before the shipped one, since a test writes nothing into the package.
LOCALES = Path(tempfile.mkdtemp(prefix="mirror-locales-"))
(LOCALES / "zh_Hans" / "LC_MESSAGES").mkdir(parents=True)
(LOCALES / "zh_Hans" / "LC_MESSAGES" / "genbot.po").write_text("""\
msgid ""
msgstr ""
"Language: zh_Hans\\n"
"Content-Type: text/plain; charset=utf-8\\n"

msgctxt "verb_mirror"
msgid "Mirror"
msgstr "镜像"

msgctxt "help_mirror"
msgid "the image flipped left to right"
msgstr "左右翻转图片"

msgctxt "about_mirror"
msgid "the image flipped left to right"
msgstr "左右翻转的图片"
""", encoding="utf-8")
