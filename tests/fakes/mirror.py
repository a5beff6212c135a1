"""A new image action, "mirror" (the parent's image flipped left to right), written as the
recipe in docs/architecture.md says — each block below is what one product file would
gain — so tests/test_new_action.py can prove every front picks it up from the tables alone.
Imported before anything else of genbot's in a process of its own."""

from __future__ import annotations

from typing import Any

from PIL import Image, ImageOps

from bot import messages  # 4. bot/messages.py: its words
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

# 4. bot/messages.py
messages.CATALOG.update({
    "verb_mirror": ("Mirror", "镜像"),
    "help_mirror": ("the image flipped left to right", "左右翻转图片"),
    "about_mirror": ("the image flipped left to right", "左右翻转的图片"),
})
