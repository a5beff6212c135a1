"""Regenerate the example sheets and the pictures they name:  python examples/make_examples.py

The pictures are drawn here (no downloads); the sheets come from the templates' own
examples, so they always match the templates.
"""

import csv
import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bot.intake.sheets import example_rows, write_example  # noqa: E402
from executor.workflow import load_templates  # noqa: E402

# (template, header language): one set of sheets with Chinese headers.
SHEETS = {"product_main": "en", "material_swap": "en", "social_thumb": "zh"}


def bottle() -> Image.Image:
    img = Image.new("RGB", (512, 512))
    draw = ImageDraw.Draw(img)
    for y in range(512):  # a warm backdrop gradient
        draw.line([(0, y), (511, y)], fill=(235 - y // 6, 200 - y // 5, 160 - y // 6))
    draw.rounded_rectangle([176, 170, 336, 440], radius=36, fill=(40, 90, 120))
    draw.rectangle([226, 110, 286, 175], fill=(40, 90, 120))
    draw.rectangle([216, 80, 296, 112], fill=(180, 150, 60))
    draw.ellipse([200, 230, 250, 330], fill=(120, 180, 210))  # a highlight
    return img.filter(ImageFilter.GaussianBlur(1))


def chair() -> Image.Image:
    img = Image.new("RGB", (512, 512), (220, 222, 226))
    draw = ImageDraw.Draw(img)
    wood = (150, 100, 60)
    draw.rectangle([150, 90, 360, 290], outline=wood, width=18)       # back
    draw.rectangle([130, 280, 380, 320], fill=wood)                   # seat
    for x in (140, 350):
        draw.rectangle([x, 320, x + 20, 470], fill=wood)              # legs
    draw.polygon([(130, 320), (380, 320), (400, 340), (110, 340)], fill=(120, 80, 50))
    return img


def main() -> None:
    assets = HERE / "assets"
    assets.mkdir(exist_ok=True)
    bottle().save(assets / "bottle.png")
    chair().save(assets / "chair.png")
    templates, errors = load_templates(HERE.parent / "templates")
    assert not errors, errors
    for name, lang in SHEETS.items():
        (HERE / f"{name}.xlsx").write_bytes(write_example(templates[name], lang))
        text = io.StringIO()
        csv.writer(text, lineterminator="\r\n").writerows(example_rows(templates[name], lang))
        (HERE / f"{name}.csv").write_text(text.getvalue(), encoding="utf-8-sig")
        print(f"wrote examples/{name}.xlsx and .csv")


if __name__ == "__main__":
    main()
