"""What a person would reject at a glance, found before they look: unsafe content, the
words a model was asked to write spelt wrong, words where a channel allows none.

Two small ONNX models that ship inside their packages do the looking (nothing is
downloaded, nothing touches the GPU): NudeNet's detector for exposed parts, and RapidOCR
(PP-OCR, Chinese and Latin) for words. Each runs once on a job's picture, beside the next
generation, and its findings go on every file made from it (templates.deliver_checks
names them; bot/messages.py says them, check_<code>):

- `nsfw`: a part the detector finds exposed, at NSFW_SCORE or more
- `text`: a phrase the prompt quotes (“夏日特惠”, "Summer sale") — what a text-rendering
  model such as Qwen-Image is asked to draw — is not read back from the picture, or is
  read with its characters wrong (each phrase is looked for among the words read, as
  characters, ignoring spaces, punctuation and case)
- `words`: a file of a channel that allows no words (Amazon's main image) is made from a
  picture in which words are read (the visible AI label is drawn later, and is the law's)
- `product`: a template that keeps its product pixel-exact (its `keep`: the photo put back
  inside its mask) made a picture whose product differs from the photo there — a mask
  that missed, an edit or a repaint that reached it. No model: the photo, stretched to the
  picture as the keep step stretches it, compared inside the mask (its edge left out)

Which run is [deliver] checks. A model that cannot be loaded is said once and its check
left out: a missing check never stops the files being made.
"""

from __future__ import annotations

import difflib
import logging
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import numpy as np
from PIL import Image, ImageFilter

from storage.files import FileStore, batch_folder
from templates.channels import Deliverable
from templates.deliver_checks import Finding
from templates.jobs import BoundJob, ComfyJob

log = logging.getLogger("genbot.executor")

NSFW_SCORE = 0.5
# NudeNet's labels for what is exposed (its others: faces, covered parts, feet, belly …).
EXPOSED = frozenset({"FEMALE_BREAST_EXPOSED", "FEMALE_GENITALIA_EXPOSED",
                     "MALE_GENITALIA_EXPOSED", "BUTTOCKS_EXPOSED", "ANUS_EXPOSED"})
KEPT = 0.98  # of the product's pixels that must match the photo's where it is kept
MATCH = 12  # how far (per channel) a kept pixel may be from the photo's (encoding, rounding)
READ_SCORE = 0.6  # a line RapidOCR reads with less confidence is not counted
SPELT = 0.85  # how alike (difflib's ratio) a phrase and the best match read must be
OCR_SIDE = 1280  # a larger picture is read at this long side: words drawn to be read survive
# Phrases a prompt asks to be written: in Chinese or Western double quotes, or corner
# brackets (at least one character; a run of quotes is no phrase).
QUOTED = re.compile(r"“([^”]{1,80})”|\"([^\"]{1,80})\"|「([^」]{1,80})」|『([^』]{1,80})』")
PROMPT_KEYS = ("prompt", "prompt_2", "text", "text_g", "text_l")


def quoted(prompts: Iterable[str]) -> list[str]:
    """The phrases the prompts quote, each once, in order."""
    found: dict[str, None] = {}
    for prompt in prompts:
        for m in QUOTED.finditer(prompt):
            phrase = next(g for g in m.groups() if g is not None).strip()
            if _letters(phrase):
                found.setdefault(phrase, None)
    return list(found)


def prompts(job: BoundJob) -> list[str]:
    """The positive prompts the job's model read (a negative prompt says what not to draw)."""
    if isinstance(job, ComfyJob):
        out = []
        for node in job.prompt.values():
            inputs = node.get("inputs", {}) if isinstance(node, dict) else {}
            title = str(node.get("_meta", {}).get("title", "")).lower() \
                if isinstance(node, dict) else ""
            if "negative" in title:
                continue
            out += [v for k, v in inputs.items() if k in PROMPT_KEYS and isinstance(v, str)]
        return out
    return [v for step in job.nodes for k, v in step.inputs.items()
            if k in PROMPT_KEYS and isinstance(v, str)]


def _letters(text: str) -> str:
    """What spelling is compared on: letters and digits, case and width folded."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in text if unicodedata.category(c)[0] in "LN")


def misspelt(phrase: str, read: Sequence[str]) -> tuple[float, str] | None:
    """(how alike, the best match) when `phrase` is not among the words read; None when it
    is. The best match is the window of the read text, of the phrase's length, most alike:
    a long phrase passes with a character the reader got wrong (SPELT), a short one must
    be read exactly."""
    want = _letters(phrase)
    text = _letters("".join(read))
    if not want or want in text:
        return None
    best, where = 0.0, ""
    for i in range(max(1, len(text) - len(want) + 1)):
        window = text[i:i + len(want)]
        ratio = difflib.SequenceMatcher(None, want, window, autojunk=False).ratio()
        if ratio > best:
            best, where = ratio, window
    return None if best >= SPELT else (best, where)


@dataclass
class Inspector:
    """The models [deliver] checks turns on, each loaded at its first picture (and kept:
    loading takes a second, looking a fraction of one). Thread-safe: one picture at a time."""
    checks: frozenset[str]
    _nsfw: Any = None
    _ocr: Any = None
    _broken: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def inspect(self, picture: Image.Image, job: BoundJob, store: FileStore | None = None,
                batch_id: int = 0) -> list[list[Finding]]:
        """Per deliverable of the job, in order: what its picture breaks (`store`,
        `batch_id`: where its product photo and mask are, for the product check)."""
        wanted = quoted(prompts(job)) if "text" in self.checks else []
        no_words = "words" in self.checks and any(not d.rendition.text for d in job.deliver)
        with self._lock:
            shared = self._unsafe(picture)
            if "product" in self.checks and store is not None:
                shared += product_drift(picture, job, store, batch_id)
            read = self._read(picture) if (wanted or no_words) else None
        if read is not None:
            for phrase in wanted:
                wrong = misspelt(phrase, read)
                if wrong is not None:
                    shared.append(Finding("text", {"want": phrase, "read": wrong[1] or "—",
                                                   "percent": round(wrong[0] * 100)}))
        return [shared + self._words(d, read) for d in job.deliver]

    @staticmethod
    def _words(d: Deliverable, read: list[str] | None) -> list[Finding]:
        if d.rendition.text or not read:
            return []
        words = [w for w in read if len(_letters(w)) >= 2]
        return [Finding("words", {"read": " ".join(words)[:60]})] if words else []

    def _unsafe(self, picture: Image.Image) -> list[Finding]:
        if "nsfw" not in self.checks or "nsfw" in self._broken:
            return []
        if self._nsfw is None and not self._load("nsfw"):
            return []
        bgr = np.ascontiguousarray(np.asarray(picture.convert("RGB"))[:, :, ::-1])
        return nsfw_findings(self._nsfw.detect(bgr))

    def _read(self, picture: Image.Image) -> list[str] | None:
        """The lines of words read from the picture (None: no reader)."""
        if "ocr" in self._broken or (self._ocr is None and not self._load("ocr")):
            return None
        im = picture.convert("RGB")
        if max(im.size) > OCR_SIDE:
            im.thumbnail((OCR_SIDE, OCR_SIDE), Image.Resampling.LANCZOS)
        result = self._ocr(np.asarray(im))
        texts, scores = result.txts or (), result.scores or ()
        return [t for t, s in zip(texts, scores) if s >= READ_SCORE and t.strip()]

    def _load(self, which: str) -> bool:
        try:
            if which == "nsfw":
                from nudenet import NudeDetector  # type: ignore[import-untyped]
                self._nsfw = NudeDetector()
            else:
                from rapidocr import RapidOCR
                self._ocr = RapidOCR(params={"Global.log_level": "error"})  # (not "no words")
        except Exception as e:  # noqa: BLE001 - a model that cannot load: said, check left out
            self._broken.add(which)
            log.error("check %s: its model cannot be loaded (%s: %s); files are made "
                      "without it", which, type(e).__name__, e)
            return False
        return True


def nsfw_findings(detections: Iterable[dict[str, Any]]) -> list[Finding]:
    """NudeNet's detections ({"class", "score", "box"}) as one finding, or none."""
    exposed = sorted({(d["class"], float(d["score"])) for d in detections
                      if d.get("class") in EXPOSED and float(d.get("score", 0)) >= NSFW_SCORE},
                     key=lambda cs: -cs[1])
    if not exposed:
        return []
    return [Finding("nsfw", {"parts": ", ".join(dict.fromkeys(c.lower() for c, _ in exposed)),
                             "percent": round(exposed[0][1] * 100)})]


def product_drift(picture: Image.Image, job: BoundJob, store: FileStore,
                  batch_id: int) -> list[Finding]:
    """The `product` finding where the job keeps its product and the picture's pixels
    inside the product's mask are not the photo's."""
    found = kept_product(job, store, batch_id)
    if found is None:
        return []
    photo, alpha, blend = found
    size = picture.size
    photo = photo.convert("RGB").resize(size, Image.Resampling.LANCZOS) \
        if photo.size != size else photo.convert("RGB")
    alpha = alpha.resize(size, Image.Resampling.LANCZOS) if alpha.size != size else alpha
    hard = alpha.point(lambda v: 255 if v >= 128 else 0)
    # the mask's edge (blended into the scene, and resampled) is left out of the count
    core = hard.filter(ImageFilter.MinFilter(2 * (blend + 2) + 1)) if blend >= 0 else hard
    inside = np.asarray(core) == 255
    if inside.sum() < 64:
        return []
    far = np.abs(np.asarray(picture.convert("RGB"), dtype=np.int16)
                 - np.asarray(photo, dtype=np.int16)).max(axis=2)
    share = float((far[inside] <= MATCH).mean())
    return [] if share >= KEPT else [Finding("product", {"percent": round(share * 100, 1),
                                                         "want": round(KEPT * 100)})]


def kept_product(job: BoundJob, store: FileStore, batch_id: int
                 ) -> tuple[Image.Image, Image.Image, int] | None:
    """The photo a job's keep step puts back, its mask (the mask column's, the photo's own
    transparency, or the one the background-removal model cut, saved beside the image)
    and the blend; None where the job keeps no product or its mask is not to be had."""
    if isinstance(job, ComfyJob):
        return None
    step = next((s for s in job.nodes if s.op == "keep_product"), None)
    if step is None or not isinstance(step.inputs.get("product"), str):
        return None
    product, mask = step.inputs["product"], step.inputs.get("mask")
    candidates = [mask] if isinstance(mask, str) else [store.mask_of(product)]
    if not isinstance(mask, str) and isinstance(beside := step.inputs.get("beside"), str):
        cut = PurePosixPath(f"{batch_folder(batch_id)}/{beside}")  # (the matting model's)
        candidates.append(str(cut.with_name(f"{cut.stem}.mask.png")))
    try:
        with Image.open(store.path(product)) as opened:
            photo = opened.convert("RGB")
        for name in candidates:
            path = store.path(name)
            if path.exists():
                with Image.open(path) as m:
                    return photo, m.convert("L"), int(step.inputs.get("blend") or 0)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None
    return None
