"""Deliverables benchmark: what a row's sales-channel pack costs on the CPU.

  python bench/deliver_bench.py [--source 1024] [--images 4] [--repeat 3] [--smoke]

A 4-channel pack (taobao's three files, douyin, xiaohongshu, jd: six renditions) made
from --images generated-looking 1024² sources (a product on a studio background), median
of --repeat each, side by side in one process, on one core (one thread):

  bare      PIL only: resize to each rendition's size and save in its format and quality
            (the least any pipeline pays for the files)
  make      templates.renditions.prepare (the product found once a picture) and .make
            for each rendition: whiten, fit, draw the visible label, encode with the sRGB
            profile and the implicit label, meet max_kb
  sign      templates.provenance.Signer: the generated picture's C2PA manifest (a local
            ES256 certificate, the product photo as an ingredient), then each file's,
            naming the picture as its parent (its manifest carried); per file
  checks    templates.deliver_checks.check on each file made (read back, every rule,
            the C2PA manifest validated by c2pa's own reader)
  layout    make again with the shipped `launch` layout on each file that allows words
            (headline, NEW badge, price; set to fit, then drawn)
  bind      at submission, per row: the layout bound to each rendition, its words checked
            to fit (templates.layouts; the bot's CPU, not the executor's)
  inspect   executor.inspection once per picture: NudeNet and RapidOCR (the words a
            prompt quotes read back), the models loaded before timing

Printed: milliseconds per rendition and per pack, renditions per second per core, and
the ratios make/bare, sign/make, checks/make and layout/make. The pack runs beside the
next generation on the executor's CPU: what matters is its figure against one image's
GPU time (docs/deliver.md).
--smoke: one small source, one repeat (the test suite); figures mean nothing.
"""

from __future__ import annotations

import argparse
import io
import platform
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from timing import median_ms  # noqa: E402 - bench/ is the script's own folder

PACK = ("taobao", "douyin", "xiaohongshu", "jd")


def source(side: int, n: int):
    from PIL import Image, ImageDraw
    im = Image.new("RGB", (side, side), (247 - n, 246, 244))
    d = ImageDraw.Draw(im)
    d.rounded_rectangle((int(side * (.3 + .05 * n)), int(side * .25), int(side * (.55 + .05 * n)),
                         int(side * .82)), radius=side // 50, fill=(190, 30 + 20 * n, 40))
    return im


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=int, default=1024)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.source, args.images, args.repeat = 256, 1, 1

    import dataclasses
    import tempfile

    from PIL import Image

    from executor.inspection import Inspector
    from templates import layouts, provenance
    from templates.channels import FORMATS, plan, presets
    from templates.deliver_checks import check
    from templates.jobs import DiffusersJob, Step
    from templates.renditions import Provenance, make, prepare

    chosen = plan(presets(), PACK)
    pack = chosen.bind(chosen.every_row, {"sku": "BENCH-1"})
    binder = layouts.Binder(layouts.chosen("launch", None), None, keep=str)
    laid = plan(presets(), PACK, layout=binder)
    rows = [{"sku": f"BENCH-{i}", "headline": f"夏季新款 冰丝凉感 第{i}号", "price": 100 + i}
            for i in range(20)]
    laid_pack = laid.bind(laid.every_row, rows[0])
    sources = [source(args.source, n) for n in range(args.images)]
    about = Provenance("genbot-bench", "genbot-bench-1")

    def bare() -> None:
        for im in sources:
            for d in pack:
                r = d.rendition
                out = im.resize(r.size, Image.Resampling.LANCZOS)
                out.save(io.BytesIO(), FORMATS[r.format],
                         **({} if r.format == "png" else {"quality": r.quality}))

    made, signed = [], []
    signer = provenance.Signer(provenance.local_credentials(
        Path(tempfile.mkdtemp(prefix="genbot-deliver-bench-")) / "c2pa"))
    photo = io.BytesIO()
    source(256, 0).save(photo, "PNG")

    def genbot() -> None:
        made.clear()
        for im in sources:
            prepared = prepare(im)  # as the executor's pack does: once per image
            made.extend((d, make(prepared, d, about)) for d in pack)

    pictures = []
    for im in sources:  # each generated picture as the engine stored it: a PNG
        buf = io.BytesIO()
        im.save(buf, "PNG")
        pictures.append(buf.getvalue())
    per_picture = len(pack)

    def sign() -> None:  # as the executor does: the picture, then each file naming it
        signed.clear()
        for n, picture in enumerate(pictures):
            origin = ("picture.png", signer.sign(picture, "png", "picture.png", {"bench": True},
                                                 [("product.png", photo.getvalue())],
                                                 model="sdxl"))
            for d, m in made[n * per_picture:(n + 1) * per_picture]:
                data = signer.sign_rendition(m.data, d.rendition.format, d.file,
                                             {"bench": True}, origin)
                signed.append((d, dataclasses.replace(m, data=data, signed=True)))

    def checks() -> None:
        for d, m in signed:
            check(d, m)

    def with_layout() -> None:
        for im in sources:
            prepared = prepare(im)
            for d in laid_pack:
                make(prepared, d, about)

    bound = iter(range(10**9))

    def bind() -> None:  # words never seen before each time (the fitting is cached)
        for row in rows:
            laid.bind(laid.every_row, {**row, "headline": f"{row['headline']} {next(bound)}"})

    inspector = Inspector(frozenset({"nsfw", "text", "words"}))
    job = DiffusersJob(template="bench", row=2, params={}, outputs={}, deliver=pack,
                       nodes=[Step("p", "encode", {"prompt": "海报写着“夏季新款”"})])
    inspector.inspect(sources[0], job)  # (the models load at the first picture)

    def inspect() -> None:
        for im in sources:
            inspector.inspect(im, job)

    files = len(sources) * len(pack)
    bare_ms = median_ms(bare, args.repeat) / files
    make_ms = median_ms(genbot, args.repeat) / files
    sign_ms = median_ms(sign, args.repeat) / files
    check_ms = median_ms(checks, args.repeat) / files
    layout_ms = median_ms(with_layout, args.repeat) / files
    bind_ms = median_ms(bind, args.repeat) / len(rows)
    inspect_ms = median_ms(inspect, args.repeat) / len(sources)
    failing = sum(1 for d, m in signed if check(d, m))
    print(f"deliver bench: {platform.machine()} {platform.processor() or ''}, Python "
          f"{platform.python_version()}, one thread; {args.images} source(s) of "
          f"{args.source}² x {len(pack)} renditions ({', '.join(PACK)})")
    print(f"{'':10} {'ms/file':>9} {'ms/pack':>9} {'files/s/core':>13}")
    whole = make_ms + sign_ms + check_ms
    for name, ms in (("bare", bare_ms), ("make", make_ms), ("sign", sign_ms),
                     ("checks", check_ms), ("all three", whole)):
        print(f"{name:10} {ms:9.1f} {ms * len(pack):9.1f} {1000 / ms:13.1f}")
    print(f"deliver cost: make/bare {make_ms / bare_ms:.2f}, sign/make {sign_ms / make_ms:.2f}, "
          f"checks/make {check_ms / make_ms:.2f}, layout/make {layout_ms / make_ms:.2f}; a "
          f"pack of {len(pack)} files {whole * len(pack) / 1000:.2f} s of one core; "
          f"{failing} of {files} files need review")
    print(f"layout: {layout_ms:.1f} ms/file made with it; at submission {bind_ms:.1f} ms a "
          f"row to bind and fit ({len(laid_pack)} renditions)")
    print(f"inspect: {inspect_ms:.1f} ms a picture (NudeNet + RapidOCR, all cores onnx "
          "gives it)")


if __name__ == "__main__":
    main()
