"""Memory planned from a model's files (executor.models.memory): what it needs at the load
dtype, the offload that fits a budget, and the executor's placement saying why not."""

from __future__ import annotations

import numpy as np
import pytest
from safetensors.numpy import save_file

from executor.models import memory
from templates.families import profile
from tests.conftest import executor_config

MIB = 2**20


def test_weights_are_counted_from_the_tensor_tables_at_the_load_dtype(tmp_path):
    """A diffusers folder: each component's tensors at the dtype it will be loaded at
    (float32 files at 16 bits take half), integer tensors as stored; work memory is the
    family's at the size it runs, scaled by pixels and dtype."""
    folder = tmp_path / "model"
    (folder / "transformer").mkdir(parents=True)
    (folder / "vae").mkdir()
    save_file({"a": np.zeros((1024, 256), np.float32), "b": np.zeros((256,), np.float32)},
              str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))
    save_file({"c": np.zeros((128, 128), np.float16), "ids": np.zeros((1000,), np.int64)},
              str(folder / "vae" / "diffusion_pytorch_model.safetensors"))
    need = memory.need(folder, "flux", dtype_bytes=2, pixels=512 * 512)
    assert need.parts == {"transformer": (1024 * 256 + 256) * 2, "vae": 128 * 128 * 2 + 8000}
    assert need.largest == 1024 * 256 * 2
    assert need.work == round(profile("flux").work_gib * 2**30 / 4)  # a quarter of 1024²
    at_fp32 = memory.need(folder, "flux", dtype_bytes=4, pixels=512 * 512)
    assert at_fp32.parts["transformer"] == 2 * need.parts["transformer"]
    assert at_fp32.work == 2 * need.work
    single = memory.need(folder / "vae" / "diffusion_pytorch_model.safetensors", "flux",
                         dtype_bytes=2)
    assert single.parts == {"diffusion_pytorch_model": 128 * 128 * 2 + 8000}
    assert single.work == round(profile("flux").work_gib * 2**30)  # its native 1024²


def test_the_least_offloading_that_fits_is_chosen_or_none_and_why():
    need = memory.Need({"text_encoder": 900 * MIB, "transformer": 2000 * MIB, "vae": 100 * MIB},
                       largest=50 * MIB, work=500 * MIB)
    assert [memory.plan(need, b * MIB).offload for b in (4000, 3000, 800, 600)] == [
        "none", "model", "sequential", None]
    assert memory.plan(need, 3000 * MIB, "none").offload is None
    assert memory.plan(need, 3000 * MIB, "none").why_not("none") == (
        'it needs about 3.4 GiB with offload = "none", more than the 2.9 GiB this executor '
        'may use; offload = "model" would fit')
    assert memory.plan(need, 600 * MIB).why_not("auto") == (
        'it needs about 0.7 GiB even one layer at a time (offload = "sequential"), more than '
        "the 0.6 GiB this executor may use")
    assert need.on_device("model", batch=4) == 2000 * MIB + 4 * 500 * MIB


def test_the_executor_plans_each_model_and_leaves_what_cannot_fit(tmp_path, demo_models):
    """Placement reads each model's files before any job is taken: with a budget between
    what the SD demo needs whole and with model offload, it runs offloaded; asked to run
    whole ("none") it is left, naming what it needs, what the executor has and the offload
    that would fit; a file genbot cannot read is left saying why."""
    from executor.diffusers.engine import DiffusersEngine
    from executor.models import demo
    sd15 = memory.need(demo_models / "sd15", "sd15", dtype_bytes=4, pixels=64 * 64,
                       work_gib=demo.DEMO_WORK_GIB)
    budget = (sd15.on_device("none") + sd15.on_device("model")) / 2
    (tmp_path / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    config = executor_config(
        tmp_path / "data", demo_models, executor={"vram_budget_gb": budget / 2**30},
        models={"sd15_whole": {"path": "demo:sd15", "offload": "none"},
                "broken": str(tmp_path / "broken.safetensors")})
    engine = DiffusersEngine(config)
    try:
        allowed = engine.placement()
    finally:
        engine.gpu.shutdown()
        engine.finishers.shutdown()
    assert engine.cache.offloads["sd15"] == "model"
    assert allowed is not None and "sd15" in allowed and "sd15_whole" not in allowed
    assert engine.cannot["sd15_whole"] == memory.plan(sd15, budget, "none").why_not("none")
    assert engine.cannot["sd15_whole"].endswith('; offload = "model" would fit')
    assert engine.cannot["broken"].startswith(f'[models] broken = "{tmp_path}/broken.'
                                              'safetensors": not a readable .safetensors file')
    assert set(engine.cannot) == {"sd15_whole", "broken"}


@pytest.mark.parametrize("family", ["sd15", "flux", "qwen_image", "zimage"])
def test_every_family_has_a_working_memory(family):
    assert profile(family).work_gib > 0
