"""A bound job: one row of a sheet bound into its template, typed.

This is what the queue stores on a job (as JSON) and what an executor runs: enough to
make the image again. Two kinds, told apart by `engine`:

  DiffusersJob  genbot's own graph: its nodes in the order they run, each input either
                a value or {"@": "node.output"} (another node's result)
  ComfyJob      a team's ComfyUI workflow with the row's values set, and the pictures
                the executor uploads before it posts the prompt

Storage keeps JSON and knows nothing of these types: `encode` is called once, where a
job is queued, and `decode` once, where a stored job is read back (an executor's
lease, a results sheet). Jobs queued before the engine tag existed decode as diffusers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from templates.channels import Deliverable
from templates.signatures import OPS

COMFY = "comfyui"


class Step(msgspec.Struct, frozen=True):
    """One node of a bound graph: its op and its inputs, every value resolved."""
    id: str
    op: str
    inputs: dict[str, Any]


class Upload(msgspec.Struct, frozen=True, array_like=True):
    """A picture a ComfyUI prompt needs: uploaded, then its server name put in the input."""
    node: str
    input: str
    stored: str  # the file store's path of the picture


class DiffusersJob(msgspec.Struct, kw_only=True, tag_field="engine", tag="diffusers"):
    template: str
    row: int
    params: dict[str, Any]  # each parameter's typed value (seeds drawn and recorded)
    nodes: list[Step]
    outputs: dict[str, str]  # saving node -> its file name in the batch's folder
    named: dict[str, str] = {}  # image parameter -> the picture as the sheet named it
    columns: dict[str, str] = {}  # the sheet's other columns its text uses: to bind again
    version: str = ""  # the template's version that bound it (templates.loader.version_of)
    revision: int = 0  # that version's number (storage.versions); 0: not recorded
    axes: dict[str, Any] = {}  # a sweep's: the values it swept to, and its seed number
    deliver: list[Deliverable] = []  # its sales channels' files (executor.deliver)
    made_from: str = ""  # the image it changes (an edit, a variation, an upscale), as the
    #   file store keeps it: its Content Credentials name that one as their parent

    @property
    def affinity(self) -> str | None:
        """The model it needs first: a claim prefers jobs for a model already loaded."""
        for step in self.nodes:
            if OPS[step.op].modes and isinstance(step.inputs.get("model"), str):
                return step.inputs["model"]
        return None


class ComfyJob(msgspec.Struct, kw_only=True, tag_field="engine", tag=COMFY):
    template: str
    row: int
    params: dict[str, Any]
    prompt: dict[str, Any]  # the API-format workflow with this row's values set
    uploads: list[Upload] = []
    outputs: dict[str, str]  # {"images": the first image's name}; more get -2, -3 …
    named: dict[str, str] = {}
    columns: dict[str, str] = {}
    version: str = ""
    revision: int = 0
    axes: dict[str, Any] = {}
    deliver: list[Deliverable] = []
    made_from: str = ""

    @property
    def affinity(self) -> str:
        """Only ComfyUI executors that can run this template claim it."""
        return comfy_affinity(self.template)

    @property
    def image_name(self) -> str:
        return self.outputs["images"]


BoundJob = DiffusersJob | ComfyJob


def comfy_affinity(template: str) -> str:
    return f"{COMFY}:{template}"


def encode(job: BoundJob) -> dict[str, Any]:
    """The job as the queue stores it (JSON data)."""
    return msgspec.to_builtins(job)


def decode(data: dict[str, Any]) -> BoundJob:
    """A stored job, typed; msgspec.ValidationError if it is not one."""
    if "engine" not in data:  # queued before jobs carried their engine
        data = {**data, "engine": "diffusers"}
    return msgspec.convert(data, BoundJob)
