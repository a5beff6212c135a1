"""A product kept intact (a template's `keep`): the photo's pixels put back over what is
made, byte for byte inside the product's mask, whatever the model did — for a row, and
for what an action makes of its image. The mask is the picture's own transparency, kept
beside it when the sheet's picture is stored, or a mask column."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from PIL import Image

from bot.intake.images import ImageResolver
from bot.settings import IntakeConfig
from executor.diffusers.ops import Context, OpError
from executor.diffusers.ops.image import keep_product
from storage.files import FileStore
from templates.binding import bind
from templates.loader import TemplateError, load_template
from tests.conftest import ROOT


def product_png(size=(96, 96)) -> bytes:
    """A product photo with transparency: an opaque noisy bottle shape (every pixel its
    own colour, so any change shows) on a transparent background."""
    rng = np.random.default_rng(7)
    rgba = np.zeros((size[1], size[0], 4), np.uint8)
    rgba[..., :3] = rng.integers(0, 256, (size[1], size[0], 3))
    rgba[20:80, 30:66, 3] = 255  # the bottle: opaque
    rgba[10:20, 42:54, 3] = 255  # its neck
    buf = io.BytesIO()
    Image.fromarray(rgba, "RGBA").save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture
async def stored(tmp_path):
    """The photo as a sheet's picture is stored (opaque RGB, its mask beside it)."""
    store = FileStore(tmp_path / "store")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "bottle.png").write_bytes(product_png())
    resolver = ImageResolver(IntakeConfig(), store, assets_dir=tmp_path / "assets")
    return store, await resolver.resolve("bottle.png")


def pixels(im) -> np.ndarray:
    return np.asarray(im.convert("RGB"), dtype=np.int16)


async def test_a_transparent_picture_is_stored_opaque_with_its_mask_beside_it(stored):
    store, path = stored
    with Image.open(store.path(path)) as im:
        assert im.mode == "RGB"  # what every other op reads, as before
    with Image.open(store.path(store.mask_of(path))) as mask:
        alpha = np.asarray(mask)
    original = np.asarray(Image.open(io.BytesIO(product_png())))
    assert np.array_equal(alpha, original[..., 3])
    opaque = original[..., 3] == 255
    assert np.array_equal(pixels(Image.open(store.path(path)))[opaque],
                          original[..., :3][opaque])  # the product's own pixels, unchanged


@pytest.mark.parametrize("blend", [0, 2, 5])
async def test_inside_the_mask_every_pixel_is_the_photos(stored, blend):
    """Whatever the model made, inside the mask (past `blend` px from its edge) each pixel
    is the photo's, exactly; outside it, the made image's, exactly; between, a blend."""
    store, path = stored
    made = Image.new("RGB", (96, 96), (10, 200, 30))
    out = pixels(keep_product(Context(store), made, path, blend=blend))
    photo = pixels(Image.open(store.path(path)))
    alpha = np.asarray(Image.open(store.path(store.mask_of(path))))
    inside = _eroded(alpha == 255, blend)
    assert inside.sum() > 1000
    assert np.array_equal(out[inside], photo[inside])
    assert (out[alpha == 0] == (10, 200, 30)).all()
    band = (alpha == 255) & ~inside
    if blend:
        assert band.any() and not np.array_equal(out[band], photo[band])


def _eroded(mask: np.ndarray, px: int) -> np.ndarray:
    """`mask` shrunk by `px` pixels (a square neighbourhood, as PIL's MinFilter)."""
    out = mask.copy()
    for _ in range(px):
        shifted = [np.roll(np.roll(out, dy, 0), dx, 1) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
        out = np.logical_and.reduce(shifted)
    return out


async def test_a_shadow_falls_below_the_product_and_leaves_it_exact(stored):
    store, path = stored
    made = Image.new("RGB", (96, 96), (200, 200, 200))
    plain = pixels(keep_product(Context(store), made, path, blend=0))
    shaded = pixels(keep_product(Context(store), made, path, blend=0, shadow=0.8))
    alpha = np.asarray(Image.open(store.path(store.mask_of(path))))
    assert np.array_equal(shaded[alpha == 255], plain[alpha == 255])
    assert shaded[82:86, 40:56].mean() < plain[82:86, 40:56].mean() - 20  # just below it
    assert np.array_equal(shaded[:5], plain[:5])  # far above: untouched
    low = FileStore.input_name(b"low")  # a product at the very bottom: no shadow wraps round
    mask = Image.new("L", (96, 96), 0)
    mask.paste(255, (30, 80, 66, 96))
    flat = Image.new("RGB", (96, 96), (90, 90, 90))
    buf = io.BytesIO()
    flat.save(buf, "PNG")
    store.write(low, buf.getvalue())
    top = pixels(keep_product(Context(store), made, low, mask=mask, blend=0, shadow=1.0))[:8]
    assert (top == (200, 200, 200)).all()


async def test_a_mask_picture_or_none_and_another_size(stored, tmp_path):
    """A mask column's white is the product (the photo may be opaque); with neither mask
    nor transparency the image is left as made; an image of another size gets the photo
    stretched to it, as the generation's control image was."""
    store, path = stored
    made = Image.new("RGB", (96, 96), (10, 200, 30))
    opaque = FileStore.input_name(b"x")  # an opaque photo: no mask beside it
    buf = io.BytesIO()
    Image.new("RGB", (96, 96), (250, 0, 0)).save(buf, "PNG")
    store.write(opaque, buf.getvalue())
    assert np.array_equal(pixels(keep_product(Context(store), made, opaque)), pixels(made))
    square = Image.new("L", (96, 96), 0)
    square.paste(255, (0, 0, 48, 48))
    out = pixels(keep_product(Context(store), made, opaque, mask=square, blend=0))
    assert (out[:48, :48] == (250, 0, 0)).all() and (out[48:, 48:] == (10, 200, 30)).all()
    big = pixels(keep_product(Context(store), Image.new("RGB", (192, 192)), path, blend=0))
    stretched = pixels(Image.open(store.path(path)).resize((192, 192), Image.Resampling.LANCZOS))
    assert np.array_equal(big[60:140, 70:120], stretched[60:140, 70:120])


def test_keep_puts_the_product_back_before_every_save_and_is_checked(tmp_path):
    """product_main keeps its product: its bound row puts the photo back before the save
    (after the upscale), and a keep naming no image parameter is refused at load."""
    template = load_template(ROOT / "templates" / "shipped" / "product_main.json")
    job = bind(template, {"sku": "A", "product_image": "inputs/p.png", "prompt": "x",
                          "negative": "", "seed": 1, "steps": None, "guidance": None,
                          "size": None, "control_scale": 0.8, "upscale": 2.0}, row=2)
    ops = [s.op for s in job.nodes]
    assert ops == ["canny", "generate", "upscale", "keep_product", "save"]
    keep, save = job.nodes[3:]
    assert keep.inputs["image"] == {"@": "big.image"} and keep.inputs["product"] == "inputs/p.png"
    assert save.inputs["image"] == {"@": f"{keep.id}.image"}
    source = json.loads((ROOT / "templates" / "shipped" / "product_main.json").read_text())
    for keep_as, says in (("prompt", "keep.picture: expected an image parameter"),
                          ({"picture": "product_image", "blend": 40}, "keep.blend"),
                          ({"picture": "product_image", "shade": 1}, "keep: expected")):
        (tmp_path / "product_main.json").write_text(json.dumps({**source, "keep": keep_as}))
        with pytest.raises(TemplateError, match=says):
            load_template(tmp_path / "product_main.json")


async def test_a_product_kept_through_the_executor_and_an_actions_edit(tmp_path, demo_models):
    """product_main on the demo models with a transparent photo at the output's size: the
    saved image's product pixels are the photo's, byte for byte, though the model drew
    noise; an instruction edit of that image puts the product back too."""
    from templates.actions import fill, instruct
    from tests.conftest import executor_config
    from tests.fakes.executor import Harness
    config = executor_config(tmp_path / "data", demo_models)
    store = FileStore(config.data_dir)
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "bottle.png").write_bytes(product_png((128, 128)))
    path = await ImageResolver(IntakeConfig(), store,
                               assets_dir=tmp_path / "assets").resolve("bottle.png")
    template = load_template(ROOT / "templates" / "shipped" / "product_main.json")
    row = bind(template, {"sku": "A", "product_image": path, "prompt": "a bottle",
                          "negative": "", "seed": 3, "steps": 2, "guidance": None,
                          "size": None, "control_scale": 0.8, "upscale": 2.0}, row=2)
    from storage.queue import NewJob
    from templates.jobs import encode
    async with Harness(config) as h:
        (done,) = await h.run("product_main", [NewJob(2, encode(row), row.affinity)])
        assert done.status == "succeeded", done.error
        out = pixels(Image.open(store.path(done.outputs[0])))
        photo = pixels(Image.open(store.path(path)))
        alpha = np.asarray(Image.open(store.path(store.mask_of(path))))
        inside = _eroded(alpha == 255, 2)
        assert out.shape == photo.shape and np.array_equal(out[inside], photo[inside])
        assert not np.array_equal(out[alpha == 0], photo[alpha == 0])  # the scene is new
        child = instruct(template, row, done.outputs[0], "把背景换成海滩", "flux_kontext")
        assert [s.op for s in child.nodes] == ["edit", "keep_product", "save"]
        (edited,) = await h.run("product_main", [NewJob(2, encode(child), child.affinity)])
        assert edited.status == "succeeded", edited.error
        again = pixels(Image.open(store.path(edited.outputs[0])))
        assert np.array_equal(again[inside], photo[inside])
        # a repaint whose mask covers the product too: the product put back all the same;
        # an extend: the whole image, the product in it, where it was in the grown canvas
        mask = Image.new("L", (128, 128), 0)
        mask.paste(255, (20, 20, 110, 110))
        mask_path = store.put_input(_png(mask))
        painted = fill(template, row, done.outputs[0], "sd15", "repaint", "sand",
                       mask=mask_path)
        wide = fill(template, row, done.outputs[0], "sd15", "extend", aspect="16:9")
        assert [s.op for s in painted.nodes] == ["fill", "keep_product", "save"]
        assert [s.op for s in wide.nodes] == ["fill", "save"]  # (moving it would be wrong)
        ran = await h.run("product_main", [NewJob(2, encode(c), c.affinity)
                                           for c in (painted, wide)])
        assert [r.status for r in ran] == ["succeeded", "succeeded"], [r.error for r in ran]
        repainted = pixels(Image.open(store.path(ran[0].outputs[0])))
        assert np.array_equal(repainted[inside], photo[inside])
        assert not np.array_equal(repainted[60:70, 20:30], out[60:70, 20:30])  # (sand)
        untouched = (np.asarray(mask) == 0) & (alpha == 0)  # (the product's edge blends again)
        assert np.array_equal(repainted[untouched], out[untouched])  # as it was
        extended = pixels(Image.open(store.path(ran[1].outputs[0])))
        assert extended.shape[:2] == (128, 228)
        assert np.array_equal(extended[:, 50:178], out)  # the image, the product in it


def _png(im: Image.Image) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def test_a_keep_without_a_product_is_the_image_as_made(tmp_path):
    made = Image.new("RGB", (8, 8), "blue")
    assert keep_product(Context(FileStore(tmp_path)), made, None) is made
    with pytest.raises(OpError):
        keep_product(Context(FileStore(tmp_path)), made, "inputs/none.png")


def dark_bottle_png(size=(96, 96)) -> bytes:
    """A product photo as most are: opaque, a dark noisy bottle on a white background."""
    rng = np.random.default_rng(11)
    rgb = np.full((size[1], size[0], 3), 255, np.uint8)
    rgb[20:80, 30:66] = rng.integers(0, 60, (60, 36, 3))
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "PNG")
    return buf.getvalue()


def test_a_photo_without_transparency_is_cut_out_by_the_background_removal_model(tmp_path):
    """No transparency and no mask column: [executor] matting's model (an .onnx file, run
    by onnxruntime) says where the product is; its pixels are put back exactly inside
    that, and the mask is saved beside the image for review. Without the model the image
    is left as made; a file that is not a model is said in one sentence."""
    import asyncio

    import torch

    from executor.diffusers.cache import ModelCache
    from executor.models.registry import ModelError, Registry
    from storage import config as cfg
    from tests.fakes.matting import write_dark_finder
    store = FileStore(tmp_path / "store")
    (tmp_path / "assets").mkdir()
    (tmp_path / "assets" / "bottle.png").write_bytes(dark_bottle_png())
    path = asyncio.run(ImageResolver(IntakeConfig(), store, assets_dir=tmp_path / "assets")
                       .resolve("bottle.png"))
    assert not store.path(store.mask_of(path)).exists()  # opaque: nothing kept beside
    write_dark_finder(tmp_path / "finder.onnx")
    (tmp_path / "broken.onnx").write_bytes(b"not a model")
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "models": {"finder": str(tmp_path / "finder.onnx"),
                                       "broken": str(tmp_path / "broken.onnx")}})
    cache = ModelCache(Registry(config), "cpu", torch.float32, vram_budget=float("inf"),
                       ram_budget=float("inf"))
    made = Image.new("RGB", (96, 96), (30, 120, 200))  # what a model drew: a blue scene
    assert keep_product(Context(store, cache, batch_id=4), made, path) is made  # no model
    ctx = Context(store, cache, matting="finder", batch_id=4)
    out = pixels(keep_product(ctx, made, path, blend=2, beside="A1/2.png"))
    photo = pixels(Image.open(store.path(path)))
    bottle = np.zeros((96, 96), bool)
    bottle[22:78, 32:64] = True  # (inside the 2 px blend)
    assert np.array_equal(out[bottle], photo[bottle])
    assert (out[:10] == (30, 120, 200)).all()  # the scene around it, as made
    with Image.open(store.path("outputs/batch_4/A1/2.mask.png")) as beside:
        mask = np.asarray(beside)
    assert mask[50, 48] > 200 and mask[5, 5] < 50  # white on the bottle, for review
    assert "finder" in ctx.used_models
    with pytest.raises(ModelError, match='model "broken": .*broken.onnx: not a model '
                                         "onnxruntime can load"):
        keep_product(Context(store, cache, matting="broken"), made, path)


def test_a_photo_is_cut_out_once_for_every_row_that_keeps_it(tmp_path, monkeypatch):
    """The rows of a SKU, the cells of a sweep and the actions on its images keep one
    photo: the background-removal model runs once for it, and again only for another
    photo or a model file replaced in place; the mask is the same each time."""
    import os

    from executor.models import matting
    from tests.fakes.matting import write_dark_finder
    model = tmp_path / "finder.onnx"
    write_dark_finder(model)
    runs = []
    real = matting._session

    class Counted:
        def __init__(self, session):
            self.session = session

        def get_inputs(self):
            return self.session.get_inputs()

        def run(self, *args):
            runs.append(1)
            return self.session.run(*args)
    monkeypatch.setattr(matting, "_session", lambda path: Counted(real(path)))
    photo = Image.open(io.BytesIO(dark_bottle_png()))
    first = matting.cut_out(model, photo)
    assert np.array_equal(pixels(matting.cut_out(model, photo.copy())), pixels(first))
    assert len(runs) == 1
    matting.cut_out(model, photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT))  # another
    os.utime(model, ns=(1, 1))  # the model replaced in place
    matting.cut_out(model, photo)
    assert len(runs) == 3
