"""What every op shares: the run's Context, OpError, and the registry ops join with `@op`.

An op is one function per op in templates.signatures. It takes the run's Context first,
then exactly the inputs its signature declares, and returns its output: one value (kept
under the op's `output` name), or a dict when the op has several. A `batched` op takes a
list of input dicts and returns a list of results, one per job, in one call; the runner
groups jobs for it by the op's `shape` (inputs of one shape can share a call). A
`device` op may run a model: a job's nodes up to its last device op are the GPU's work,
the rest (pillow ops, save) its finish, which the executor runs beside the next job.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from PIL import Image

from storage.files import FileStore
from templates.jobs import DiffusersJob
from templates.signatures import OPS, check_signatures


class OpError(Exception):
    """A problem with a job's own inputs: retrying the same job would fail the same way."""


# An image input as an op receives it: another node's output, or a file-store path from the
# sheet (Context.image reads either).
ImageInput: TypeAlias = Image.Image | str


@dataclass
class Context:
    """What ops may use while running one job (or one micro-batch of jobs)."""
    store: FileStore
    models: Any = None  # executor.diffusers.cache.ModelCache; None where no op needs a model
    font: str = ""
    upscaler: str = ""
    matting: str = ""  # [executor] matting: the model that cuts a product out of its photo
    # Filled per job by the runner:
    batch_id: int = 0
    job: DiffusersJob | None = None
    used_models: list[str] = field(default_factory=list)
    on_step: Callable[[int, int], bool] | None = None  # (step, total) -> stop?
    # (decode, latents, step, total): a picture of the image forming, where one is due
    preview: Callable[[Callable[[Any], list[Image.Image]], Any, int, int], None] | None = None

    def image(self, value: Any) -> Image.Image:
        """An image input: another node's output, or a file-store path from the sheet."""
        if isinstance(value, Image.Image):
            return value
        if isinstance(value, str):
            try:
                with Image.open(self.store.path(value)) as im:
                    return im.convert("RGB")
            except (OSError, ValueError) as e:
                raise OpError(f"cannot read input image {value}: {e}") from None
        raise OpError(f"expected an image, got {type(value).__name__}")


@dataclass(frozen=True)
class Op:
    """An op as the runner sees it: how to call it and where its result goes."""
    name: str
    run: Callable[..., Any]
    output: str = "image"  # the name a single result is kept under (node.output)
    batched: bool = False  # run(ctx, [inputs, …]) -> [result, …]: one call for many jobs
    shape: Callable[[dict[str, Any]], Hashable] | None = None  # batched: what must match
    device: bool = False  # runs a model (the GPU's work); the rest runs off the GPU's path


REGISTRY: dict[str, Op] = {}


OpFunction = TypeVar("OpFunction", bound=Callable[..., Any])


def op(*, output: str = "image", batched: bool = False,
       shape: Callable[[dict[str, Any]], Hashable] | None = None,
       device: bool = False) -> Callable[[OpFunction], OpFunction]:
    """Register the decorated function as the op of its name (a trailing _ dropped)."""
    def register(fn: OpFunction) -> OpFunction:
        name = fn.__name__.rstrip("_")
        if batched and shape is None:
            raise TypeError(f"op {name}: a batched op says which inputs must match (shape)")
        REGISTRY[name] = Op(name, fn, output, batched, shape, device)
        return fn
    return register


def check_registry() -> None:
    """Every op declared in signatures has an implementation and a size rule, and an
    unbatched one takes exactly its signature's inputs (a batched one takes them as dicts)."""
    check_signatures(OPS)
    if set(REGISTRY) != set(OPS):
        raise RuntimeError(f"ops without a signature or implementation: {set(REGISTRY) ^ set(OPS)}")
    for name, spec in REGISTRY.items():
        if spec.batched:
            continue
        params = list(inspect.signature(spec.run).parameters.values())[1:]
        if [p.name for p in params] != list(OPS[name].inputs):
            raise RuntimeError(f"op {name} does not take exactly the inputs of its signature")
