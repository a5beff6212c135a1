"""Regenerate the example sheets and the pictures they name:  python examples/make_examples.py

The pictures are genbot's own drawings (bot/intake/examples.py; no downloads); the
sheets come from the templates' own examples, so they always match the templates.
"""

import csv
import io
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bot.intake.examples import drawn  # noqa: E402
from bot.intake.writer import example_rows, write_example  # noqa: E402
from templates.loader import load_templates  # noqa: E402

# (template, header language): one set of sheets with Chinese headers.
SHEETS = {"product_main": "en", "material_swap": "en", "social_thumb": "zh", "poster_zh": "zh",
          "edit_instruction": "zh"}


def main() -> None:
    assets = HERE / "assets"
    assets.mkdir(exist_ok=True)
    for name in ("bottle.png", "chair.png"):
        (assets / name).write_bytes(drawn(name))
    templates, errors = load_templates(HERE.parent / "templates" / "shipped")
    assert not errors, errors
    for name, lang in SHEETS.items():
        (HERE / f"{name}.xlsx").write_bytes(write_example(templates[name], lang))
        text = io.StringIO()
        csv.writer(text, lineterminator="\r\n").writerows(example_rows(templates[name], lang))
        (HERE / f"{name}.csv").write_text(text.getvalue(), encoding="utf-8-sig")
        print(f"wrote examples/{name}.xlsx and .csv")


if __name__ == "__main__":
    main()
