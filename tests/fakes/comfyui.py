"""A ComfyUI server on loopback for testing genbot's ComfyUI client: ComfyUI's own HTTP routes and
WebSocket messages, its prompt validation and error shapes, one prompt worker, and fault switches.

Written from ComfyUI's source, read through the code index (shapes reproduced, code not copied):
- Comfy-Org/ComfyUI server.py @ 5e14d797 (routes, /ws, POST /prompt with a client prompt_id,
  /interrupt with prompt_id, /upload/image renaming, /view, node_info), and the same file in
  comfyanonymous/ComfyUI @ 005f3ba4 and @ d4b50979 (before prompt_id and structured no_prompt).
- Comfy-Org/ComfyUI execution.py @ 04e2a914 (validate_prompt / validate_inputs error shapes,
  PromptExecutor messages, history status, PromptQueue, the classic cache); main.py @ 02018c7e
  (prompt_worker: history first, then `executing` with node null; the progress hook);
  nodes.py @ 02217e36 (INPUT_TYPES, SaveImage naming, LoadImage VALIDATE_INPUTS, display names);
  folder_paths.py @ 1df2885e (get_save_image_path's counter); comfy_execution/progress.py
  @ 1b71f275 (progress_state); comfy_execution/asset_enrichment.py @ 228da558 (a cached output
  node still sends `executed`); comfy_execution/jobs.py @ 172be438 (validate_job_id);
  comfy/sampler_names.py and comfy_extras/nodes_canny.py from comfyanonymous/ComfyUI.
- The older "Cannot execute because node X does not exist." (type invalid_prompt) shape, seen in
  index excerpts of older execution.py: FakeComfy(error_style="classic") serves it; the default
  "current" serves master's missing_node_type / no_prompt / invalid_prompt_id / 409 shapes.

Choices: nodes.py's choice inputs use the classic `[[choice, ...], {options}]` form; the newer
(V3 schema) nodes' serve `["COMBO", {"options": [...]}]`, as ComfyUI does for them.
The FLUX, Qwen-Image and Z-Image nodes of ComfyUI's own template corpus (`_model_nodes`): nodes.py
and comfy_extras/nodes_{flux,qwen,custom_sampler,model_advanced,sd3,cfg,edit_model,images,
post_processing,primitive}.py @ a125cd84 with comfy_api/latest/_io.py (how a schema becomes
/object_info), and the newer versions of nodes_{flux,qwen,cfg,post_processing,custom_sampler,
logic}.py read through the code index (Flux2Scheduler, EmptyFlux2LatentImage, CFGNorm's pre_cfg,
ImageScaleToTotalPixels' resolution_steps, ComfySwitchNode). Only their inputs are served, for
/object_info and validation (a V3 MatchType input takes any type): the fake cannot run them.
Execution is fake: each node computes a small dict (the checkpoint, the text, the seed...), and
SaveImage / PreviewImage write a small solid PNG whose colour comes from (positive prompt, seed,
ckpt_name, input-image hash, batch index), with the resolved values in a `fake_comfy` text chunk,
so a test can tell which request reached which image (read_fake_info, fake_color). Outputs are
cached by input signature like ComfyUI's classic cache (cache=False is --cache-none): a prompt
sent again runs nothing and reports the same files.

Hostile or broken servers (`hostile=`, one of HOSTILE): the same routes and message shapes,
with one thing a custom node, a broken build or a hostile server makes odd — a save node that
writes a page with a script, a text file named .png, a video (ComfyUI's own SaveWEBM and
SaveVideo report theirs under "images" with "animated": [true]), a decompression bomb; or a
/history answer whose names hold a NUL or `..`, whose node ids are odd, whose parts have the
wrong JSON shape. `fail_node` with a message holding line breaks or terminal escapes is the
error text case.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import io
import itertools
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web
from PIL import Image, PngImagePlugin

from tests.fakes import media

# comfy/sampler_names.py
SAMPLERS = [
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2",
    "dpm_2", "dpm_2_ancestral", "lms", "dpm_fast", "dpm_adaptive", "dpmpp_2s_ancestral",
    "dpmpp_2s_ancestral_cfg_pp", "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp",
    "dpmpp_2m_sde", "dpmpp_2m_sde_gpu", "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu",
    "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm", "lcm", "ipndm", "ipndm_v", "deis", "res_multistep",
    "res_multistep_cfg_pp", "res_multistep_ancestral", "res_multistep_ancestral_cfg_pp",
    "gradient_estimation", "gradient_estimation_cfg_pp", "er_sde", "seeds_2", "seeds_3",
    "sa_solver", "sa_solver_pece", "ddim", "uni_pc", "uni_pc_bh2"]
SCHEDULERS = ["normal", "karras", "exponential", "sgm_uniform", "simple", "ddim_uniform", "beta",
              "linear_quadratic", "kl_optimal"]
# Every ckpt_name / lora_name in /work/shared/comfyui-workflows/*.json, plus a few more.
CHECKPOINTS = ["dreamshaper_8.safetensors", "sd_xl_base_1.0.safetensors",
               "sd_xl_refiner_1.0.safetensors", "v1-5-pruned-emaonly.safetensors"]
LORAS = ["epi_noiseoffset2.safetensors", "add_detail.safetensors"]
CONTROLNETS = ["control_v11p_sd15_canny.pth", "control_v11f1p_sd15_depth.pth"]
# The model files ComfyUI's own FLUX.1 (dev, Redux, Kontext), FLUX.2, Qwen-Image (+ Edit) and
# Z-Image-Turbo workflows name, by folder: diffusion_models, text_encoders, vae, clip_vision,
# style_models.
DIFFUSION_MODELS = ["flux1-dev.safetensors", "flux1-dev-kontext_fp8_scaled.safetensors",
                    "flux2_dev_fp8mixed.safetensors", "qwen_image_fp8_e4m3fn.safetensors",
                    "qwen_image_edit_fp8_e4m3fn.safetensors",
                    "qwen_image_edit_2511_fp8mixed.safetensors", "z_image_turbo_bf16.safetensors",
                    "flux-2-klein-base-4b.safetensors"]
TEXT_ENCODERS = ["clip_l.safetensors", "t5xxl_fp16.safetensors",
                 "t5xxl_fp8_e4m3fn_scaled.safetensors", "qwen_2.5_vl_7b_fp8_scaled.safetensors",
                 "qwen_3_4b.safetensors", "mistral_3_small_flux2_bf16.safetensors"]
VAES = ["ae.safetensors", "qwen_image_vae.safetensors", "full_encoder_small_decoder.safetensors",
        "flux2-vae.safetensors"]
CLIP_VISION = ["sigclip_vision_patch14_384.safetensors"]
STYLE_MODELS = ["flux1-redux-dev.safetensors"]
CLIP_TYPES = ["stable_diffusion", "stable_cascade", "sd3", "stable_audio", "mochi", "ltxv",
              "pixart", "cosmos", "lumina2", "wan", "hidream", "chroma", "ace", "omnigen2",
              "qwen_image", "hunyuan_image", "flux2", "ovis", "longcat_image"]
DUAL_CLIP_TYPES = ["sdxl", "sd3", "flux", "hunyuan_video", "hidream", "hunyuan_image",
                   "hunyuan_video_15", "kandinsky5", "kandinsky5_image"]
OOM_MESSAGE = ("Allocation on device \nThis error means you ran out of memory on your GPU.\n\n"
               "TIPS: If the workflow worked before you might have accidentally set the batch_size"
               " to a large number.")
MAX_SIDE = 64  # written images are at most this on the long side; the asked size is in the chunk
SAMPLER_NODES = ("KSampler", "KSamplerAdvanced")
# hostile= modes: what each makes odd (see the module docstring).
HOSTILE = {
    # the files a save node writes and reports
    "html": "writes a page with a script, named ..._.html",
    "text_png": "writes a text file named ..._.png",
    "png_named_html": "writes its PNG named ..._.html",
    "jpeg": "writes a JPEG named ..._.png",
    "webm": "writes a WebM video named ..._.webm, as SaveWEBM ('animated': [true])",
    "mp4": "writes an MP4 video named ..._.mp4, as SaveVideo ('animated': [true])",
    "bomb": "writes a PNG declaring 100000 x 100000 pixels",
    "huge_view": "answers /view with more bytes than any output should have (Content-Length)",
    # what /history/{prompt_id} answers
    "nul_name": "a NUL in each image's filename",
    "dotdot_name": "each image's subfolder is ../../..",
    "odd_type": "each image's type is not output, temp or input",
    "odd_node": 'the output node\'s id is "²" (str.isdigit() says yes, int() says no)',
    "outputs_list": "outputs is a list, not an object",
    "images_string": "a node's images is a string, not a list",
    "status_list": "the entry's status is a list, not an object",
    "entry_list": "the entry is a list, not an object",
    "history_list": "the whole answer is a list, not an object",
    "history_500": "a 500 whose text holds a line break and terminal escapes",
    # what GET /object_info answers
    "odd_object_info": "KSampler described as a list, CLIPTextEncode's inputs as a string",
    # what POST /upload/image answers
    "odd_upload_name": "the name it stored a picture under is ../../x.png",
    # what POST /prompt answers
    "odd_prompt_id": "the prompt_id it answers is ../../queue",
}
IMAGE_EXTS = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}


def _int(default: int, lo: int, hi: int, **kw: Any) -> list:
    return ["INT", {"default": default, "min": lo, "max": hi, **kw}]


def _float(default: float, lo: float, hi: float, step: float, **kw: Any) -> list:
    return ["FLOAT", {"default": default, "min": lo, "max": hi, "step": step, **kw}]


def node_classes(checkpoints: list[str], loras: list[str], controlnets: list[str],
                 images: list[str]) -> dict[str, dict]:
    """The core nodes genbot's workflows use, with nodes.py's INPUT_TYPES and RETURN_TYPES."""
    seed = _int(0, 0, 0xFFFFFFFFFFFFFFFF, control_after_generate=True)
    cfg = _float(8.0, 0.0, 100.0, 0.1, round=0.01)
    hidden = {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}
    size = _int(1024, 16, 16384, step=8)
    out: dict[str, dict] = {}

    def add(name: str, display: str, category: str, inputs: dict, output: tuple,
            names: tuple | None = None, **extra: Any) -> None:
        out[name] = {"input": inputs, "output": output, "output_name": names or output,
                     "display_name": display, "category": category, "output_node": False, **extra}

    add("CheckpointLoaderSimple", "Load Checkpoint", "model/loaders",
        {"required": {"ckpt_name": [list(checkpoints)]}}, ("MODEL", "CLIP", "VAE"))
    add("LoraLoader", "Load LoRA (Model and CLIP)", "model/loaders", {"required": {
        "model": ["MODEL"], "clip": ["CLIP"], "lora_name": [list(loras)],
        "strength_model": _float(1.0, -100.0, 100.0, 0.01),
        "strength_clip": _float(1.0, -100.0, 100.0, 0.01)}}, ("MODEL", "CLIP"))
    add("CLIPTextEncode", "CLIP Text Encode (Prompt)", "model/conditioning", {"required": {
        "text": ["STRING", {"multiline": True, "dynamicPrompts": True}], "clip": ["CLIP"]}},
        ("CONDITIONING",))
    add("ConditioningZeroOut", "Conditioning Zero Out", "model/conditioning/transform",
        {"required": {"conditioning": ["CONDITIONING"]}}, ("CONDITIONING",))
    add("EmptyLatentImage", "Empty Latent Image", "model/latent", {"required": {
        "width": size, "height": size, "batch_size": _int(1, 1, 4096)}}, ("LATENT",))
    sampling = {"model": ["MODEL"], "seed": seed, "steps": _int(20, 1, 10000), "cfg": cfg,
                "sampler_name": [SAMPLERS], "scheduler": [SCHEDULERS],
                "positive": ["CONDITIONING"], "negative": ["CONDITIONING"],
                "latent_image": ["LATENT"]}
    add("KSampler", "KSampler", "model/sampling", {"required": {
        **sampling, "denoise": _float(1.0, 0.0, 1.0, 0.01)}}, ("LATENT",))
    advanced = {k: v for k, v in sampling.items() if k != "seed"}
    add("KSamplerAdvanced", "KSampler (Advanced)", "model/sampling", {"required": {
        "model": ["MODEL"], "add_noise": [["enable", "disable"], {"advanced": True}],
        "noise_seed": seed, **advanced,
        "start_at_step": _int(0, 0, 10000, advanced=True),
        "end_at_step": _int(10000, 0, 10000, advanced=True),
        "return_with_leftover_noise": [["disable", "enable"], {"advanced": True}]}}, ("LATENT",))
    add("VAEDecode", "VAE Decode", "model/latent",
        {"required": {"samples": ["LATENT"], "vae": ["VAE"]}}, ("IMAGE",))
    add("VAEEncode", "VAE Encode", "model/latent",
        {"required": {"pixels": ["IMAGE"], "vae": ["VAE"]}}, ("LATENT",))
    add("LoadImage", "Load Image", "image",
        {"required": {"image": [sorted(images), {"image_upload": True}]}}, ("IMAGE", "MASK"))
    add("SaveImage", "Save Image", "image", {"required": {
        "images": ["IMAGE"], "filename_prefix": ["STRING", {"default": "ComfyUI"}]},
        "hidden": hidden}, ("IMAGE",), ("images",), output_node=True)
    add("PreviewImage", "Preview Image", "image", {"required": {"images": ["IMAGE"]},
        "hidden": hidden}, ("IMAGE",), ("images",), output_node=True)
    add("ControlNetLoader", "Load ControlNet Model", "model/loaders",
        {"required": {"control_net_name": [list(controlnets)]}}, ("CONTROL_NET",))
    add("ControlNetApply", "Apply ControlNet (DEPRECATED)", "model/conditioning/controlnet",
        {"required": {"conditioning": ["CONDITIONING"], "control_net": ["CONTROL_NET"],
                      "image": ["IMAGE"], "strength": _float(1.0, 0.0, 10.0, 0.01)}},
        ("CONDITIONING",), deprecated=True)
    add("ControlNetApplyAdvanced", "Apply ControlNet", "model/conditioning/controlnet", {
        "required": {"positive": ["CONDITIONING"], "negative": ["CONDITIONING"],
                     "control_net": ["CONTROL_NET"], "image": ["IMAGE"],
                     "strength": _float(1.0, 0.0, 10.0, 0.01),
                     "start_percent": _float(0.0, 0.0, 1.0, 0.001),
                     "end_percent": _float(1.0, 0.0, 1.0, 0.001)},
        "optional": {"vae": ["VAE"]}}, ("CONDITIONING", "CONDITIONING"), ("positive", "negative"))
    add("Canny", "Canny", "image/preprocessors", {"required": {
        "image": ["IMAGE"], "low_threshold": _float(0.4, 0.01, 0.99, 0.01),
        "high_threshold": _float(0.8, 0.01, 0.99, 0.01)}}, ("IMAGE",),
        python_module="comfy_extras.nodes_canny")
    _model_nodes(add, loras, seed, cfg, size)
    return out


def _combo(options: list, **kw: Any) -> list:
    """A choice as ComfyUI's newer (V3) nodes describe one in /object_info."""
    return ["COMBO", {"options": list(options), **kw}]


def _model_nodes(add: Any, loras: list[str], seed: list, cfg: list, size: list) -> None:
    """The nodes ComfyUI's own FLUX, Qwen-Image and Z-Image workflows use (its template
    corpus): loaders of a diffusion model and its text encoders, the custom sampler's
    parts, the edit models' conditioning, primitives and the switch. Inputs as ComfyUI
    serves them: nodes.py's classic INPUT_TYPES (choices as lists), the newer nodes'
    schemas as their V1 /object_info (choices as ["COMBO", {"options": …}])."""
    mod = "comfy_extras.nodes_"
    flux, qwen = "advanced/conditioning/flux", "model/conditioning/qwen image"
    add("UNETLoader", "Load Diffusion Model", "advanced/loaders", {"required": {
        "unet_name": [list(DIFFUSION_MODELS)],
        "weight_dtype": [["default", "fp8_e4m3fn", "fp8_e4m3fn_fast", "fp8_e5m2"]]}},
        ("MODEL",))
    device = {"device": [["default", "cpu"], {"advanced": True}]}
    add("CLIPLoader", "Load CLIP", "advanced/loaders", {"required": {
        "clip_name": [list(TEXT_ENCODERS)], "type": [CLIP_TYPES]}, "optional": device},
        ("CLIP",))
    add("DualCLIPLoader", "DualCLIPLoader", "advanced/loaders", {"required": {
        "clip_name1": [list(TEXT_ENCODERS)], "clip_name2": [list(TEXT_ENCODERS)],
        "type": [DUAL_CLIP_TYPES]}, "optional": device}, ("CLIP",))
    add("VAELoader", "Load VAE", "loaders", {"required": {"vae_name": [list(VAES)]}}, ("VAE",))
    add("LoraLoaderModelOnly", "LoraLoaderModelOnly", "loaders", {"required": {
        "model": ["MODEL"], "lora_name": [list(loras)],
        "strength_model": _float(1.0, -100.0, 100.0, 0.01)}}, ("MODEL",))
    add("CLIPVisionLoader", "Load CLIP Vision", "loaders",
        {"required": {"clip_name": [list(CLIP_VISION)]}}, ("CLIP_VISION",))
    add("CLIPVisionEncode", "CLIP Vision Encode", "conditioning", {"required": {
        "clip_vision": ["CLIP_VISION"], "image": ["IMAGE"], "crop": [["center", "none"]]}},
        ("CLIP_VISION_OUTPUT",))
    add("StyleModelLoader", "Load Style Model", "loaders",
        {"required": {"style_model_name": [list(STYLE_MODELS)]}}, ("STYLE_MODEL",))
    add("StyleModelApply", "Apply Style Model", "conditioning/style_model", {"required": {
        "conditioning": ["CONDITIONING"], "style_model": ["STYLE_MODEL"],
        "clip_vision_output": ["CLIP_VISION_OUTPUT"],
        "strength": _float(1.0, 0.0, 10.0, 0.001),
        "strength_type": [["multiply", "attn_bias"]]}}, ("CONDITIONING",))
    latent = {"width": _int(1024, 16, 16384, step=16), "height": _int(1024, 16, 16384, step=16),
              "batch_size": _int(1, 1, 4096)}
    add("EmptySD3LatentImage", "EmptySD3LatentImage", "latent/sd3", {"required": latent},
        ("LATENT",), python_module=mod + "sd3")
    add("EmptyFlux2LatentImage", "Empty Flux 2 Latent", "latent", {"required": latent},
        ("LATENT",), python_module=mod + "flux")
    guidance = _float(3.5, 0.0, 100.0, 0.1)
    add("FluxGuidance", "FluxGuidance", flux, {"required": {
        "conditioning": ["CONDITIONING"], "guidance": guidance}}, ("CONDITIONING",),
        python_module=mod + "flux")
    add("CLIPTextEncodeFlux", "CLIPTextEncodeFlux", flux, {"required": {
        "clip": ["CLIP"], "clip_l": ["STRING", {"multiline": True, "dynamicPrompts": True}],
        "t5xxl": ["STRING", {"multiline": True, "dynamicPrompts": True}],
        "guidance": guidance}}, ("CONDITIONING",), python_module=mod + "flux")
    add("FluxKontextImageScale", "FluxKontextImageScale", flux,
        {"required": {"image": ["IMAGE"]}}, ("IMAGE",), python_module=mod + "flux")
    add("FluxKontextMultiReferenceLatentMethod", "Edit Model Reference Method", flux, {
        "required": {"conditioning": ["CONDITIONING"], "reference_latents_method": _combo(
            ["offset", "index", "uxo/uno", "index_timestep_zero"], advanced=True)}},
        ("CONDITIONING",), python_module=mod + "flux")
    add("Flux2Scheduler", "Flux2Scheduler", "sampling/custom_sampling/schedulers", {
        "required": {"steps": _int(20, 1, 4096), "width": _int(1024, 16, 16384, step=1),
                     "height": _int(1024, 16, 16384, step=1)}}, ("SIGMAS",),
        python_module=mod + "flux")
    add("ModelSamplingFlux", "ModelSamplingFlux", "advanced/model", {"required": {
        "model": ["MODEL"], "max_shift": _float(1.15, 0.0, 100.0, 0.01),
        "base_shift": _float(0.5, 0.0, 100.0, 0.01), "width": size, "height": size}},
        ("MODEL",), python_module=mod + "model_advanced")
    add("ModelSamplingAuraFlow", "ModelSamplingAuraFlow", "advanced/model", {"required": {
        "model": ["MODEL"], "shift": _float(1.73, 0.0, 100.0, 0.01)}}, ("MODEL",),
        python_module=mod + "model_advanced")
    add("ReferenceLatent", "ReferenceLatent", "advanced/conditioning/edit_models", {
        "required": {"conditioning": ["CONDITIONING"]}, "optional": {"latent": ["LATENT"]}},
        ("CONDITIONING",), python_module=mod + "edit_model")
    add("TextEncodeQwenImageEdit", "Text Encode Qwen Image Edit", qwen, {
        "required": {"clip": ["CLIP"], "prompt": ["STRING", {"multiline": True,
                                                             "dynamicPrompts": True}]},
        "optional": {"vae": ["VAE"], "image": ["IMAGE"]}}, ("CONDITIONING",),
        python_module=mod + "qwen")
    add("TextEncodeQwenImageEditPlus", "Text Encode Qwen Image Edit Plus", qwen, {
        "required": {"clip": ["CLIP"], "prompt": ["STRING", {"multiline": True,
                                                             "dynamicPrompts": True}]},
        "optional": {"vae": ["VAE"], "image1": ["IMAGE"], "image2": ["IMAGE"],
                     "image3": ["IMAGE"]}}, ("CONDITIONING",), python_module=mod + "qwen")
    add("CFGNorm", "CFGNorm", "advanced/guidance", {
        "required": {"model": ["MODEL"], "strength": _float(1.0, 0.0, 100.0, 0.01)},
        "optional": {"pre_cfg": ["BOOLEAN", {"default": False}]}}, ("MODEL",), ("patched_model",),
        python_module=mod + "cfg")
    add("ImageStitch", "Image Stitch", "image/transform", {
        "required": {"image1": ["IMAGE"],
                     "direction": [["right", "down", "left", "up"], {"default": "right"}],
                     "match_image_size": ["BOOLEAN", {"default": True}],
                     "spacing_width": _int(0, 0, 1024, step=2),
                     "spacing_color": [["white", "black", "red", "green", "blue"],
                                       {"default": "white"}]},
        "optional": {"image2": ["IMAGE"]}}, ("IMAGE",), python_module=mod + "images")
    add("ImageScaleToTotalPixels", "Scale Image to Total Pixels", "image/upscaling", {
        "required": {"image": ["IMAGE"], "upscale_method": _combo(
            ["nearest-exact", "bilinear", "area", "bicubic", "lanczos"]),
            "megapixels": _float(1.0, 0.01, 16.0, 0.01),
            "resolution_steps": _int(1, 1, 256, advanced=True)}}, ("IMAGE",),
        python_module=mod + "post_processing")
    # the custom sampler: noise, guider, sampler and sigmas as nodes of their own
    custom = "sampling/custom_sampling"
    add("RandomNoise", "RandomNoise", custom + "/noise", {"required": {"noise_seed": seed}},
        ("NOISE",), python_module=mod + "custom_sampler")
    add("KSamplerSelect", "KSamplerSelect", custom + "/samplers",
        {"required": {"sampler_name": _combo(SAMPLERS)}}, ("SAMPLER",),
        python_module=mod + "custom_sampler")
    add("BasicScheduler", "BasicScheduler", custom + "/schedulers", {"required": {
        "model": ["MODEL"], "scheduler": _combo(SCHEDULERS), "steps": _int(20, 1, 10000),
        "denoise": _float(1.0, 0.0, 1.0, 0.01)}}, ("SIGMAS",),
        python_module=mod + "custom_sampler")
    add("BasicGuider", "BasicGuider", custom + "/guiders", {"required": {
        "model": ["MODEL"], "conditioning": ["CONDITIONING"]}}, ("GUIDER",),
        python_module=mod + "custom_sampler")
    add("CFGGuider", "CFGGuider", custom + "/guiders", {"required": {
        "model": ["MODEL"], "positive": ["CONDITIONING"], "negative": ["CONDITIONING"],
        "cfg": cfg}}, ("GUIDER",), python_module=mod + "custom_sampler")
    add("SamplerCustomAdvanced", "SamplerCustomAdvanced", custom, {"required": {
        "noise": ["NOISE"], "guider": ["GUIDER"], "sampler": ["SAMPLER"], "sigmas": ["SIGMAS"],
        "latent_image": ["LATENT"]}}, ("LATENT", "LATENT"), ("output", "denoised_output"),
        python_module=mod + "custom_sampler")
    # primitives (comfy_extras/nodes_primitive.py) and the switch (nodes_logic.py)
    big = {"min": -sys.maxsize, "max": sys.maxsize}
    for name, display, spec in (
            ("PrimitiveInt", "Int", ["INT", {**big, "control_after_generate": True}]),
            ("PrimitiveFloat", "Float", ["FLOAT", big]),
            ("PrimitiveBoolean", "Boolean", ["BOOLEAN", {}]),
            ("PrimitiveString", "String", ["STRING", {}]),
            ("PrimitiveStringMultiline", "String (Multiline)", ["STRING", {"multiline": True}])):
        add(name, display, "utils/primitive", {"required": {"value": spec}}, (spec[0],),
            python_module=mod + "primitive")
    either = ["COMFY_MATCHTYPE_V3", {"lazy": True, "template": {"template_id": "switch",
                                                                  "allowed_types": "*"}}]
    add("ComfySwitchNode", "Switch", "logic", {"required": {
        "switch": ["BOOLEAN", {}], "on_false": either, "on_true": either}}, ("*",),
        ("output",), python_module=mod + "logic")


def fake_color(info: dict) -> tuple[int, int, int]:
    """The colour of a fake image: a hash of what should make two generations differ."""
    key = json.dumps([info.get("prompt"), info.get("seed"), info.get("ckpt_name"),
                      info.get("image_sha256"), info.get("batch_index", 0)])
    d = hashlib.sha256(key.encode()).digest()
    return d[0], d[1], d[2]


def read_fake_info(png: bytes) -> dict:
    """The `fake_comfy` chunk of an image the fake wrote: what reached the sampler."""
    with Image.open(io.BytesIO(png)) as img:
        return json.loads(img.info["fake_comfy"])


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _is_link(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and isinstance(v[0], str) and isinstance(v[1], int)


def _err(kind: str, message: str, details: str, extra: dict) -> dict:
    return {"type": kind, "message": message, "details": details, "extra_info": extra}


def _type_name(ex: BaseException) -> str:
    """execution.full_type_name: "RuntimeError", "torch.OutOfMemoryError"."""
    module = type(ex).__module__
    return type(ex).__qualname__ if module == "builtins" else f"{module}.{type(ex).__qualname__}"


def _within(base: Path | str, target: Path | str) -> bool:
    base, target = os.path.realpath(base), os.path.realpath(target)
    return os.path.commonpath((base, target)) == base


class _Interrupted(Exception):
    def __init__(self, node_id: str):
        self.node_id = node_id


class _Failure(Exception):
    """A node's exception as ComfyUI reports it: full type name, and str(ex) + "\\n" + tips."""

    def __init__(self, exception_type: str, message: str, after_steps: int = 0):
        super().__init__(message)
        self.exception_type, self.message, self.after_steps = exception_type, message, after_steps
        self.node_id = ""
        self.vals: dict = {}


class FakeComfy:
    """`async with FakeComfy(**knobs) as comfy:` serves ComfyUI at `comfy.url`.

    Knobs (all also mutable attributes): checkpoints, loras, controlnets (model lists),
    missing_nodes (classes it lacks), step_delay (seconds per sampler step), fail_node ({node_type,
    message, exception_type, after_steps}), oom_once, drop_socket_after_steps, restart_mid_job,
    history_delay, reject_uploads (True → 400, or a status), cache, progress_state (send
    newer ComfyUI's progress_state messages), error_style ("current" or "classic"), hostile
    (None, or one of HOSTILE: a hostile or broken server), previews (as `--preview-method
    auto`: a JPEG after each sampler step, as binary message 4 with its prompt to a client
    whose feature_flags support preview metadata, else as message 1).
    Recorders: prompts, rejected, uploads, interrupts, frees, requests, sockets, messages.
    """

    def __init__(self, *, checkpoints: list[str] | None = None, loras: list[str] | None = None,
                 controlnets: list[str] | None = None, missing_nodes: set[str] | None = None,
                 step_delay: float = 0.0, fail_node: dict | None = None, oom_once: bool = False,
                 drop_socket_after_steps: int | None = None, restart_mid_job: bool = False,
                 history_delay: float = 0.0, reject_uploads: bool | int = False,
                 cache: bool = True, progress_state: bool = True, error_style: str = "current",
                 hostile: str | None = None, root: Path | None = None, previews: bool = False):
        if hostile is not None and hostile not in HOSTILE:
            raise ValueError(f"hostile is one of {', '.join(HOSTILE)}")
        self.hostile = hostile
        self.checkpoints = list(CHECKPOINTS if checkpoints is None else checkpoints)
        self.loras = list(LORAS if loras is None else loras)
        self.controlnets = list(CONTROLNETS if controlnets is None else controlnets)
        self.missing_nodes = set(missing_nodes or ())
        self.step_delay, self.fail_node, self.oom_once = step_delay, fail_node, oom_once
        self.drop_socket_after_steps = drop_socket_after_steps
        self.restart_mid_job = restart_mid_job
        self.history_delay, self.reject_uploads, self.cache = history_delay, reject_uploads, cache
        self.progress_state, self.error_style = progress_state, error_style
        self.previews = previews
        self.flags: dict[str, dict] = {}  # client id -> the feature_flags it sent
        self.previewed = 0  # preview frames sent
        self._own_root = root is None
        self.root = Path(tempfile.mkdtemp(prefix="comfyfake-")) if root is None else Path(root)
        self.dirs = {k: self.root / k for k in ("input", "output", "temp")}
        for d in self.dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        # recorders, kept across restarts
        self.prompts: list[dict] = []  # every accepted POST /prompt body, in order
        self.rejected: list[dict] = []  # bodies answered 400
        self.uploads: dict[str, bytes] = {}  # stored name ("sub/name" in a subfolder) -> bytes
        self.interrupts: list[dict] = []  # POST /interrupt bodies ({} when none)
        self.frees = 0
        self.requests: list[tuple[str, str]] = []
        self.sockets: list[str] = []  # client ids, one per WebSocket connection, in order
        self.messages: list[tuple[str | None, dict]] = []  # (client id or None = all, message)
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._tasks: set[asyncio.Task] = set()
        self._since_drop = 0  # progress messages since drop_socket_after_steps was armed
        self._reset()

    def _reset(self) -> None:
        """What a ComfyUI process holds in memory, lost when it stops."""
        self._pending: list[tuple[float, int, list]] = []
        self._seq = itertools.count()
        self._running: list | None = None
        self._history: dict[str, dict] = {}
        self._timers: list[asyncio.TimerHandle] = []
        self._cache: dict[str, tuple[tuple, dict | None]] = {}
        self._conns: dict[str, tuple[web.WebSocketResponse, Any]] = {}
        self._number = 0
        self._client_id: str | None = None
        self._last_node: str | None = None
        self._interrupted = False
        self._free_pending = False
        self._wake = asyncio.Event()
        self._worker: asyncio.Task | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def connected(self) -> set[str]:
        return set(self._conns)

    async def __aenter__(self) -> FakeComfy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*self._tasks, return_exceptions=True)  # a restart under way
        await self.stop()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    async def start(self) -> None:
        """Start a fresh process: empty queue, history and cache; files on disk stay."""
        if self._runner is not None:
            return
        self._reset()
        app = web.Application(client_max_size=100 * 2**20, middlewares=[self._record])
        for p in ("", "/api"):  # ComfyUI serves every route under /api too
            app.router.add_get(p + "/ws", self._ws)
            app.router.add_get(p + "/prompt", self._get_prompt)
            app.router.add_post(p + "/prompt", self._post_prompt)
            app.router.add_get(p + "/queue", self._get_queue)
            app.router.add_post(p + "/queue", self._post_queue)
            app.router.add_post(p + "/interrupt", self._interrupt)
            app.router.add_post(p + "/free", self._free)
            app.router.add_get(p + "/history", self._get_history)
            app.router.add_get(p + "/history/{prompt_id}", self._get_history_item)
            app.router.add_post(p + "/history", self._post_history)
            app.router.add_get(p + "/view", self._view)
            app.router.add_post(p + "/upload/image", self._upload)
            app.router.add_get(p + "/object_info", self._object_info)
            app.router.add_get(p + "/object_info/{node_class}", self._object_info)
            app.router.add_get(p + "/system_stats", self._system_stats)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        self.port = self._runner.addresses[0][1]
        self._worker = asyncio.create_task(self._work())

    async def stop(self) -> None:
        """The process dies: sockets drop at once, the port refuses connections."""
        if self._runner is None:
            return
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
        for timer in self._timers:
            timer.cancel()
        for _, transport in list(self._conns.values()):
            if transport is not None:
                transport.abort()
        runner, self._runner = self._runner, None
        await runner.cleanup()

    async def restart(self) -> None:
        """Stop and start on the same port; the queue, history and cache are gone."""
        await self.stop()
        await self.start()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path))
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception:  # what aiohttp answers when a ComfyUI handler raises, minus the log
            return web.Response(status=500, text="500 Internal Server Error\n\n"
                                "Server got itself in trouble")

    # --- WebSocket --------------------------------------------------------------------------

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sid = request.query.get("clientId", "") or uuid.uuid4().hex
        self._conns[sid] = (ws, request.transport)  # a reconnect replaces the old socket
        self.sockets.append(sid)
        try:
            await self._send("status", {"status": self._queue_info(), "sid": sid}, sid)
            if self._client_id == sid and self._last_node is not None:
                await self._send("executing", {"node": self._last_node}, sid)  # as ComfyUI: bare
            first = True
            async for msg in ws:
                if msg.type == WSMsgType.TEXT and first:
                    try:
                        data = json.loads(msg.data)
                    except ValueError:
                        data = None  # ComfyUI logs it and goes on
                    if isinstance(data, dict) and data.get("type") == "feature_flags":
                        if isinstance(data.get("data"), dict):
                            self.flags[sid] = data["data"]
                        await self._send("feature_flags", {"supports_preview_metadata": False,
                                                           "max_upload_size": 100 * 2**20}, sid)
                    first = False
        finally:
            if self._conns.get(sid, (None,))[0] is ws:
                del self._conns[sid]
        return ws

    async def _send(self, event: str, data: dict, sid: str | None = None) -> None:
        """ComfyUI's send_json: to one client id, or to every socket when sid is None."""
        message = {"type": event, "data": data}
        self.messages.append((sid, message))
        targets = list(self._conns.values()) if sid is None else [self._conns[sid]] \
            if sid in self._conns else []
        for ws, _ in targets:
            try:
                await ws.send_json(message)
            except (ConnectionError, RuntimeError):
                pass  # ComfyUI logs "send error" and goes on

    def _queue_info(self) -> dict:
        return {"exec_info": {"queue_remaining": len(self._pending) + (self._running is not None)}}

    async def _status(self) -> None:
        await self._send("status", {"status": self._queue_info()})

    # --- HTTP -------------------------------------------------------------------------------

    async def _get_prompt(self, request: web.Request) -> web.Response:
        return web.json_response(self._queue_info())

    async def _post_prompt(self, request: web.Request) -> web.Response:
        body = await request.json()  # malformed JSON: a 500, as in ComfyUI
        original = copy.deepcopy(body)
        classic = self.error_style == "classic"
        if "number" in body:
            number = float(body["number"])
        else:
            number = -self._number if body.get("front") else self._number
            self._number += 1
        if "prompt" not in body:
            self.rejected.append(original)
            if classic:
                return web.json_response({"error": "no prompt", "node_errors": []}, status=400)
            error = _err("no_prompt", "No prompt provided", "No prompt provided", {})
            return web.json_response({"error": error, "node_errors": {}}, status=400)
        prompt_id = body.get("prompt_id")
        if prompt_id is None:
            prompt_id = str(uuid.uuid4())
        elif not classic and not self._canonical_uuid(prompt_id):
            self.rejected.append(original)
            error = _err("invalid_prompt_id", "prompt_id must be a valid UUID",
                         "prompt_id must be a UUID string in canonical lowercase hyphenated form;"
                         " omit it to let the server generate one", {})
            return web.json_response({"error": error, "node_errors": {}}, status=400)
        prompt = copy.deepcopy(body["prompt"])  # validation converts values in place, as ComfyUI
        ok, error, outputs, node_errors = self._validate(prompt)
        extra = dict(body.get("extra_data") or {})
        if "client_id" in body:
            extra["client_id"] = body["client_id"]
        if not ok:
            self.rejected.append(original)
            return web.json_response({"error": error, "node_errors": node_errors}, status=400)
        if not classic:
            extra["create_time"] = int(time.time() * 1000)
            if self._known(prompt_id):
                return web.json_response({"error": "prompt_id already exists"}, status=409)
        self._pending.append((number, next(self._seq), [number, prompt_id, prompt, extra, outputs]))
        self.prompts.append(original)
        self._wake.set()
        await self._status()
        if self.hostile == "odd_prompt_id":
            prompt_id = "../../queue"
        return web.json_response({"prompt_id": prompt_id, "number": number,
                                  "node_errors": node_errors})

    @staticmethod
    def _canonical_uuid(value: Any) -> bool:
        try:
            return isinstance(value, str) and str(uuid.UUID(value)) == value
        except ValueError:
            return False

    def _known(self, prompt_id: str) -> bool:
        items = [e[2] for e in self._pending] + ([self._running] if self._running else [])
        return prompt_id in self._history or any(item[1] == prompt_id for item in items)

    async def _get_queue(self, request: web.Request) -> web.Response:
        return web.json_response({
            "queue_running": [self._running] if self._running else [],
            "queue_pending": [e[2] for e in sorted(self._pending, key=lambda e: e[:2])]})

    async def _post_queue(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("clear"):
            self._pending = []
            await self._status()
        for prompt_id in body.get("delete", []):
            before = len(self._pending)
            self._pending = [e for e in self._pending if e[2][1] != prompt_id]
            if len(self._pending) != before:
                await self._status()
        return web.Response()

    async def _interrupt(self, request: web.Request) -> web.Response:
        """Newer ComfyUI: with a prompt_id, only if that prompt runs; else whatever runs."""
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = {}
        self.interrupts.append(body)
        prompt_id = body.get("prompt_id") if isinstance(body, dict) else None
        if not prompt_id or (self._running is not None and self._running[1] == prompt_id):
            self._interrupted = True  # reset when the next prompt starts, as ComfyUI's flag
        return web.Response()

    async def _free(self, request: web.Request) -> web.Response:
        body = await request.json()  # no body: a 500, as in ComfyUI
        self.frees += 1
        if body.get("free_memory"):
            self._free_pending = True  # the worker drops its cache between prompts
            if self._running is None:
                self._cache, self._free_pending = {}, False
        return web.Response()

    async def _get_history(self, request: web.Request) -> web.Response:
        max_items = request.query.get("max_items")
        offset = int(request.query.get("offset", -1))
        keys = list(self._history)
        if max_items is not None:
            if offset < 0:
                offset = len(keys) - int(max_items)
            keys = keys[max(offset, 0):][:int(max_items)]
        elif offset > 0:
            keys = keys[offset:]
        return web.json_response({k: self._odd(self._history[k]) for k in keys})

    async def _get_history_item(self, request: web.Request) -> web.Response:
        prompt_id = request.match_info["prompt_id"]
        if self.hostile == "history_500":
            return web.Response(status=500, text="boom\n2030-01-01 INFO genbot: forged\x1b[2J")
        entry = self._history.get(prompt_id)
        answer = {} if entry is None else {prompt_id: self._odd(entry)}
        if self.hostile == "history_list" and entry is not None:
            return web.json_response(list(answer.values()))
        return web.json_response(answer)

    def _odd(self, entry: dict) -> Any:
        """A history entry as a hostile or broken server answers it (hostile=)."""
        mode = self.hostile
        entry = copy.deepcopy(entry)
        images = [img for out in entry["outputs"].values() for img in out.get("images", [])]
        if mode == "nul_name":
            for img in images:
                img["filename"] = img["filename"].replace("_.", "_\0.")
        elif mode == "dotdot_name":
            for img in images:
                img["subfolder"] = "../../.."
        elif mode == "odd_type":
            for img in images:
                img["type"] = "../input"
        elif mode == "odd_node":
            entry["outputs"] = {"²" if "images" in out else nid: out
                                for nid, out in entry["outputs"].items()}
        elif mode == "outputs_list":
            entry["outputs"] = list(entry["outputs"].values())
        elif mode == "images_string":
            for out in entry["outputs"].values():
                if "images" in out:
                    out["images"] = ",".join(img["filename"] for img in out["images"])
        elif mode == "status_list":
            entry["status"] = [entry["status"]["status_str"], entry["status"]["messages"]]
        elif mode == "entry_list":
            return [entry["prompt"], entry["outputs"], entry["status"]]
        return entry

    async def _post_history(self, request: web.Request) -> web.Response:
        body = await request.json()
        if body.get("clear"):
            self._history.clear()
        for prompt_id in body.get("delete", []):
            self._history.pop(prompt_id, None)
        return web.Response()

    def _annotated(self, name: str, default: str) -> tuple[str, Path]:
        for kind in ("output", "input", "temp"):
            if name.endswith(f" [{kind}]"):
                return name[: -len(kind) - 3], self.dirs[kind]
        return name, self.dirs[default]

    async def _view(self, request: web.Request) -> web.StreamResponse:
        q = request.query
        if "filename" not in q:
            return web.Response(status=404)
        kind = q.get("type", "output")
        if kind not in self.dirs:
            return web.Response(status=400)
        name, base = self._annotated(q["filename"], kind)
        if not name or name[0] == "/" or ".." in name:
            return web.Response(status=400)
        folder = base / q["subfolder"] if "subfolder" in q else base
        if not _within(base, folder):
            return web.Response(status=403)
        path = folder / os.path.basename(name)
        if not path.is_file():
            return web.Response(status=404)
        if self.hostile == "huge_view":  # says so up front; sends what it has, then stops
            resp = web.StreamResponse(headers={"Content-Type": "image/png"})
            resp.content_length = 8 * 2**30
            await resp.prepare(request)
            await resp.write(path.read_bytes())
            assert request.transport is not None
            request.transport.close()
            return resp
        return web.FileResponse(path, headers={"Content-Disposition": f'filename="{path.name}"'})

    async def _upload(self, request: web.Request) -> web.Response:
        """ComfyUI's image_upload: a same-named file of other content gets "name (1).png"."""
        if self.reject_uploads:
            return web.Response(status=400 if self.reject_uploads is True else
                                int(self.reject_uploads))
        post = await request.post()
        image = post.get("image")
        if not isinstance(image, web.FileField) or not image.filename:
            return web.Response(status=400)
        kind = str(post.get("type") or "input")
        base = self.dirs[kind]  # another type: a 500, as ComfyUI's unbound variable
        subfolder = str(post.get("subfolder", ""))
        folder = base / os.path.normpath(subfolder)
        name = image.filename
        if not _within(base, folder / name):
            return web.Response(status=400)
        folder.mkdir(parents=True, exist_ok=True)
        data = image.file.read()
        duplicate = False
        if post.get("overwrite") not in ("true", "1"):
            stem, ext = os.path.splitext(name)
            for i in itertools.count(1):
                if not (folder / name).exists():
                    break
                if _sha((folder / name).read_bytes()) == _sha(data):
                    duplicate = True
                    break
                name = f"{stem} ({i}){ext}"
        if not duplicate:
            (folder / name).write_bytes(data)
        self.uploads[f"{subfolder}/{name}" if subfolder else name] = data
        if self.hostile == "odd_upload_name":
            name = "../../x.png"
        return web.json_response({"name": name, "subfolder": subfolder, "type": kind})

    def _classes(self) -> dict[str, dict]:
        images = [f.name for f in self.dirs["input"].iterdir()
                  if f.is_file() and f.suffix.lower() in IMAGE_EXTS]
        classes = node_classes(self.checkpoints, self.loras, self.controlnets, images)
        return {k: v for k, v in classes.items() if k not in self.missing_nodes}

    async def _object_info(self, request: web.Request) -> web.Response:
        classes = self._classes()
        wanted = request.match_info.get("node_class")
        out = {}
        for name, c in classes.items():
            if wanted is not None and name != wanted:
                continue
            out[name] = {
                "input": c["input"], "input_order": {k: list(v) for k, v in c["input"].items()},
                "is_input_list": False, "output": c["output"],
                "output_is_list": [False] * len(c["output"]), "output_name": c["output_name"],
                "name": name, "display_name": c["display_name"], "description": "",
                "python_module": c.get("python_module", "nodes"), "category": c["category"],
                "output_node": c["output_node"], "has_intermediate_output": False,
                "search_aliases": [], **({"deprecated": True} if c.get("deprecated") else {})}
        if self.hostile == "odd_object_info":
            if "KSampler" in out:
                out["KSampler"] = list(out["KSampler"].values())
            if "CLIPTextEncode" in out:
                out["CLIPTextEncode"]["input"] = "text, clip"
        return web.json_response(out)

    async def _system_stats(self, request: web.Request) -> web.Response:
        gib = 2**30
        return web.json_response({
            "system": {"os": sys.platform, "ram_total": 64 * gib, "ram_free": 48 * gib,
                       "comfyui_version": "0.3.99-fake", "python_version": sys.version,
                       "pytorch_version": "2.7.0+cu128", "embedded_python": False,
                       "argv": ["main.py"]},
            "devices": [{"name": "cuda:0 Fake GPU : cudaMallocAsync", "type": "cuda", "index": 0,
                         "vram_total": 24 * gib, "vram_free": 20 * gib,
                         "torch_vram_total": 2 * gib, "torch_vram_free": gib}]})

    # --- validation (execution.validate_prompt / validate_inputs) ---------------------------

    def _validate(self, prompt: dict) -> tuple[bool, Any, list[str], Any]:
        classes = self._classes()
        classic = self.error_style == "classic"
        outputs = []
        for x, node in prompt.items():  # a prompt that is not an object: a 500, as in ComfyUI
            title = (node.get("_meta") or {}).get("title") if isinstance(node, dict) else None
            if not isinstance(node, dict) or "class_type" not in node:
                error = _err("invalid_prompt", "Cannot execute because a node is missing the "
                             "class_type property.", f"Node ID '#{x}'", {}) if classic else _err(
                    "missing_node_type", f"Node '{title or f'ID #{x}'}' has no class_type. The "
                    "workflow may be corrupted or a custom node is missing.", f"Node ID '#{x}'",
                    {"node_id": x, "class_type": None, "node_title": title})
                return False, error, [], ([] if classic else {})
            class_type = node["class_type"]
            if class_type not in classes:
                error = _err("invalid_prompt", f"Cannot execute because node {class_type} does "
                             "not exist.", f"Node ID '#{x}'", {}) if classic else _err(
                    "missing_node_type", f"Node '{title or class_type}' not found. The custom "
                    "node may not be installed.", f"Node ID '#{x}'",
                    {"node_id": x, "class_type": class_type, "node_title": title or class_type})
                return False, error, [], ([] if classic else {})
            if classes[class_type]["output_node"]:
                outputs.append(x)
        if not outputs:
            error = _err("prompt_no_outputs", "Prompt has no outputs", "", {})
            return False, error, [], ([] if classic else {})
        good: list[str] = []
        failed: list[tuple[str, list]] = []
        node_errors: dict[str, dict] = {}
        validated: dict[str, tuple[bool, list, str]] = {}
        for o in outputs:
            try:
                ok, reasons, _ = self._check(classes, prompt, o, validated, [])
            except Exception as ex:
                ok, reasons = False, [_err("exception_during_validation",
                                           "Exception when validating node", str(ex),
                                           {"exception_type": _type_name(ex),
                                            "traceback": [f'  File "execution.py", in {o}\n']})]
                validated[o] = (False, reasons, o)
            if ok:
                good.append(o)
                continue
            failed.append((o, reasons))
            for nid, (valid, rs, _) in validated.items():  # every failed node so far, as ComfyUI
                if not valid and rs:
                    node_errors.setdefault(nid, {"errors": rs, "dependent_outputs": [],
                                                 "class_type": prompt[nid]["class_type"]})
                    node_errors[nid]["dependent_outputs"].append(o)
        if not good:
            details = "\n".join(f"{e['message']}: {e['details']}" for _, rs in failed for e in rs)
            error = _err("prompt_outputs_failed_validation", "Prompt outputs failed validation",
                         details, {})
            return False, error, [], node_errors
        return True, None, good, node_errors

    def _check(self, classes: dict, prompt: dict, nid: str, validated: dict,
               visiting: list[str]) -> tuple[bool, list, str]:
        if nid in validated:
            return validated[nid]
        if nid in visiting:
            cycle = visiting[visiting.index(nid):] + [nid]
            path = " -> ".join(f"{n} ({prompt[n]['class_type']})" for n in cycle)
            for n in dict.fromkeys(cycle):
                validated[n] = (False, [_err("dependency_cycle", "Dependency cycle detected", path,
                                             {"node_id": n, "cycle_nodes": list(dict.fromkeys(
                                                 cycle))})], n)
            return validated[nid]
        node = prompt[nid]
        inputs = node["inputs"]  # missing: KeyError, reported as an exception, as in ComfyUI
        spec = classes[node["class_type"]]["input"]
        errors: list[dict] = []
        valid = True
        for category in ("required", "optional"):
            for x, info in spec.get(category, {}).items():
                itype, opts = info[0], (info[1] if len(info) > 1 else {})
                if x not in inputs:
                    if category == "required":
                        errors.append(_err("required_input_missing", "Required input is missing",
                                           x, {"input_name": x}))
                    continue
                val = inputs[x]
                if isinstance(val, list):
                    if len(val) != 2:
                        errors.append(_err("bad_linked_input", "Bad linked input, must be a "
                                           "length-2 list of [node_id, slot_index]", x,
                                           {"input_name": x, "input_config": info,
                                            "received_value": val}))
                        continue
                    # a missing node or slot raises here, as in ComfyUI
                    received = classes[prompt[val[0]]["class_type"]]["output"][val[1]]
                    if not isinstance(itype, list) and "*" not in (itype, received) \
                            and received != itype and not itype.startswith("COMFY_"):
                        errors.append(_err("return_type_mismatch", "Return type mismatch between "
                                           "linked nodes", f"{x}, received_type({received}) "
                                           f"mismatch input_type({itype})",
                                           {"input_name": x, "input_config": info,
                                            "received_type": received, "linked_node": val}))
                        continue
                    visiting.append(nid)
                    try:
                        if not self._check(classes, prompt, val[0], validated, visiting)[0]:
                            valid = False
                    except Exception as ex:
                        valid = False
                        validated[val[0]] = (False, [_err(
                            "exception_during_inner_validation",
                            "Exception when validating inner node", str(ex),
                            {"input_name": x, "input_config": info, "exception_message": str(ex),
                             "exception_type": _type_name(ex), "traceback": [],
                             "linked_node": val})], val[0])
                    finally:
                        visiting.pop()
                    continue
                if isinstance(val, dict) and "__value__" in val:
                    val = inputs[x] = val["__value__"]
                try:
                    convert = {"INT": int, "FLOAT": float, "STRING": str, "BOOLEAN": bool}
                    if isinstance(itype, str) and itype in convert:
                        val = inputs[x] = convert[itype](val)
                except Exception as ex:
                    errors.append(_err("invalid_input_type", "Failed to convert an input value "
                                       f"to a {itype} value", f"{x}, {val}, {ex}",
                                       {"input_name": x, "input_config": info,
                                        "received_value": val, "exception_message": str(ex)}))
                    continue
                if node["class_type"] == "LoadImage" and x == "image":
                    if not self._input_file(str(val)).is_file():  # its VALIDATE_INPUTS
                        errors.append(_err("custom_validation_failed", "Custom validation failed "
                                           "for node", f"image - Invalid image file: {val}",
                                           {"input_name": "image"}))
                    continue
                extra = {"input_name": x, "input_config": info, "received_value": val}
                if "min" in opts and val < opts["min"]:
                    errors.append(_err("value_smaller_than_min",
                                       f"Value {val} smaller than min of {opts['min']}", x, extra))
                elif "max" in opts and val > opts["max"]:
                    errors.append(_err("value_bigger_than_max",
                                       f"Value {val} bigger than max of {opts['max']}", x, extra))
                elif (isinstance(itype, list) and val not in itype) or (
                        itype == "COMBO" and val not in opts.get("options", [val])):
                    itype = itype if isinstance(itype, list) else opts["options"]
                    big = len(itype) > 20  # ComfyUI does not send back gigantic lists
                    listed = f"(list of length {len(itype)})" if big else str(itype)
                    errors.append(_err("value_not_in_list", "Value not in list",
                                       f"{x}: {val!r} not in {listed}",
                                       {**extra, "input_config": None if big else info}))
        result = (valid and not errors, errors, nid)
        validated[nid] = result
        return result

    def _input_file(self, name: str) -> Path:
        name, base = self._annotated(name, "input")
        path = base / name
        return path if _within(base, path) else base / ".comfyfake-outside-the-folder"

    # --- the prompt worker (main.prompt_worker + execution.PromptExecutor) ------------------

    async def _work(self) -> None:
        while True:
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            entry = min(self._pending, key=lambda e: e[:2])
            self._pending.remove(entry)
            item = self._running = entry[2]
            await self._status()
            try:
                result, status = await self._execute(item)
            except Exception:  # a bug in the fake: say so, and keep serving
                traceback.print_exc()
                result = {"outputs": {}, "meta": {}}
                status = {"status_str": "error", "completed": False, "messages": []}
            self._running = None
            record = {"prompt": item, "outputs": result["outputs"], "status": status,
                      "meta": result["meta"]}
            if self.history_delay > 0:
                self._timers.append(asyncio.get_running_loop().call_later(
                    self.history_delay, self._history.__setitem__, item[1], record))
            else:
                self._history[item[1]] = record
            await self._status()
            client = item[3].get("client_id")
            if client is not None:
                await self._send("executing", {"node": None, "prompt_id": item[1]}, client)
            if self._free_pending:
                self._cache, self._free_pending = {}, False

    async def _execute(self, item: list) -> tuple[dict, dict]:
        _, pid, prompt, extra, outputs = item
        client = extra.get("client_id")
        self._client_id, self._interrupted = client, False
        messages: list[list] = []

        async def add(event: str, data: dict, broadcast: bool = False) -> None:
            data = {**data, "timestamp": int(time.time() * 1000)}
            messages.append([event, data])
            if client is not None or broadcast:
                await self._send(event, data, client)

        await add("execution_start", {"prompt_id": pid})
        sigs = self._signatures(prompt)
        self._cache = {s: e for s, e in self._cache.items() if self.cache and s in sigs.values()}
        cached = [n for n in prompt if sigs[n] in self._cache]
        await add("execution_cached", {"nodes": cached, "prompt_id": pid})
        values: dict[str, tuple] = {n: self._cache[sigs[n]][0] for n in cached}
        executed: list[str] = []
        ui: dict[str, dict] = {}
        meta: dict[str, dict] = {}
        states: dict[str, dict] = {}
        try:
            for nid in self._order(prompt, outputs, sigs):
                cls = prompt[nid]["class_type"]
                hit = self._cache.get(sigs[nid])
                if hit is not None:  # a cached output node reports its files again
                    if hit[1] is not None:
                        ui[nid], meta[nid] = hit[1], self._meta(nid)
                    if client is not None:
                        await self._send("executed", {"node": nid, "display_node": nid,
                                                      "output": hit[1], "prompt_id": pid}, client)
                    continue
                await self._state(states, nid, "running", 0, 1, pid)
                self._last_node = nid
                if client is not None:
                    await self._send("executing", {"node": nid, "display_node": nid,
                                                   "prompt_id": pid}, client)
                await asyncio.sleep(0)
                if self._interrupted:
                    raise _Interrupted(nid)
                vals = self._resolve(prompt, nid, values)
                try:
                    outs, out_ui = await self._run(nid, cls, vals, prompt, extra, states, pid)
                except _Interrupted:
                    raise
                except Exception as ex:  # any node exception becomes an execution_error
                    failure = ex if isinstance(ex, _Failure) else _Failure(
                        _type_name(ex), f"{ex}\n")
                    failure.node_id, failure.vals = nid, vals
                    raise failure from None
                values[nid] = outs
                if self.cache:
                    self._cache[sigs[nid]] = (outs, out_ui)
                if out_ui is not None:
                    ui[nid], meta[nid] = out_ui, self._meta(nid)
                    if client is not None:
                        await self._send("executed", {"node": nid, "display_node": nid,
                                                      "output": out_ui, "prompt_id": pid}, client)
                executed.append(nid)
                await self._state(states, nid, "finished", 1, 1, pid)
            await add("execution_success", {"prompt_id": pid})
            ok = True
        except _Interrupted as stop:
            ok = False
            await add("execution_interrupted", {
                "prompt_id": pid, "node_id": stop.node_id,
                "node_type": prompt[stop.node_id]["class_type"], "executed": executed},
                broadcast=True)
        except _Failure as failure:
            ok = False
            nid, vals = failure.node_id, failure.vals
            await add("execution_error", {
                "prompt_id": pid, "node_id": nid, "node_type": prompt[nid]["class_type"],
                "executed": executed, "exception_message": failure.message,
                "exception_type": failure.exception_type,
                "traceback": ['  File "/ComfyUI/execution.py", line 496, in execute\n'
                              "    output_data, output_ui, has_subgraph, has_pending_tasks = "
                              "await get_output_data(...)\n"],
                "current_inputs": {k: [v if isinstance(v, (int, float, bool, str)) or v is None
                                       else str(v)] for k, v in vals.items()},
                "current_outputs": cached})
        self._last_node = None
        status = {"status_str": "success" if ok else "error", "completed": ok,
                  "messages": messages}
        return {"outputs": ui, "meta": meta}, status

    @staticmethod
    def _meta(nid: str) -> dict:
        return {"node_id": nid, "display_node": nid, "parent_node": None, "real_node_id": nid}

    async def _state(self, states: dict, nid: str, state: str, value: float, maximum: float,
                     pid: str) -> None:
        """Newer ComfyUI's progress_state: every started node's state, on each change."""
        if not self.progress_state:
            return
        states[nid] = {"value": value, "max": maximum, "state": state, "node_id": nid,
                       "prompt_id": pid, "display_node_id": nid, "parent_node_id": None,
                       "real_node_id": nid}
        await self._send("progress_state", {"prompt_id": pid, "nodes": copy.deepcopy(states)},
                         self._client_id)

    def _signatures(self, prompt: dict) -> dict[str, str]:
        """The classic cache key: class, inputs, the upstream keys, and LoadImage's file hash."""
        sigs: dict[str, str] = {}

        def sig(nid: str) -> str:
            if nid not in sigs:
                node = prompt[nid]
                inputs = {k: ["link", sig(v[0]), v[1]] if _is_link(v) else v
                          for k, v in node["inputs"].items()}
                changed = None
                if node["class_type"] == "LoadImage":
                    path = self._input_file(str(node["inputs"].get("image")))
                    changed = _sha(path.read_bytes()) if path.is_file() else None
                sigs[nid] = _sha(json.dumps([node["class_type"], changed, inputs],
                                            sort_keys=True, default=str))
            return sigs[nid]

        for nid in prompt:
            sig(nid)
        return sigs

    def _order(self, prompt: dict, outputs: list[str], sigs: dict[str, str]) -> list[str]:
        """Each output after what it needs; a cached node's inputs are not visited."""
        order: list[str] = []

        def visit(nid: str) -> None:
            if nid in order:
                return
            if sigs[nid] not in self._cache:
                for v in prompt[nid]["inputs"].values():
                    if _is_link(v):
                        visit(v[0])
            order.append(nid)

        for o in outputs:
            visit(o)
        return order

    def _resolve(self, prompt: dict, nid: str, values: dict[str, tuple]) -> dict:
        spec = self._classes()[prompt[nid]["class_type"]]["input"]
        known = {**spec.get("required", {}), **spec.get("optional", {})}
        return {k: values[v[0]][v[1]] if _is_link(v) else v
                for k, v in prompt[nid]["inputs"].items() if k in known}

    def _failure(self, cls: str) -> _Failure | None:
        if self.oom_once and cls in SAMPLER_NODES:
            self.oom_once = False
            return _Failure("torch.OutOfMemoryError", OOM_MESSAGE)
        f = self.fail_node
        if f and f.get("node_type") == cls:
            return _Failure(f.get("exception_type", "RuntimeError"),
                            f"{f.get('message', 'fake failure')}\n", int(f.get("after_steps", 0)))
        return None

    async def _run(self, nid: str, cls: str, vals: dict, prompt: dict, extra: dict,
                   states: dict, pid: str) -> tuple[tuple, dict | None]:
        failure = self._failure(cls)
        if cls in SAMPLER_NODES:
            steps = int(vals["steps"])
            if cls == "KSamplerAdvanced":  # ComfyUI samples sigmas[start:min(end, steps)]
                count = max(min(int(vals["end_at_step"]), steps) - int(vals["start_at_step"]), 0)
            else:
                count = steps
            for i in range(1, count + 1):
                await asyncio.sleep(self.step_delay)
                if failure is not None and i > failure.after_steps:
                    raise failure
                if self._interrupted:  # the progress hook checks before it reports
                    raise _Interrupted(nid)
                await self._send("progress", {"value": i, "max": count, "prompt_id": pid,
                                              "node": nid}, self._client_id)
                await self._state(states, nid, "running", i, count, pid)
                if self.previews:
                    await self._preview(pid, nid, i, count)
                await self._after_progress()
            if failure is not None:
                raise failure
            return (self._sample(vals),), None
        if failure is not None:
            raise failure
        if cls in ("SaveImage", "PreviewImage"):
            return (vals["images"],), self._save(nid, cls, vals, prompt, extra)
        return self._evaluate(cls, vals), None

    async def _preview(self, pid: str, nid: str, step: int, count: int) -> None:
        """ComfyUI's previewer after a step: a JPEG (512 px at most; here 64 px, darker to
        lighter as the steps go), with its prompt where the client said it reads that."""
        shade = 255 * step // max(count, 1)
        out = io.BytesIO()
        Image.new("RGB", (64, 64), (shade, 64, 255 - shade)).save(out, "JPEG")
        target = self._conns.get(self._client_id or "")
        if target is None:
            return
        if self.flags.get(self._client_id or "", {}).get("supports_preview_metadata"):
            meta = json.dumps({"node_id": nid, "prompt_id": pid, "display_node_id": nid,
                               "parent_node_id": None, "real_node_id": nid,
                               "image_type": "image/jpeg"}).encode()
            frame = struct.pack(">II", 4, len(meta)) + meta + out.getvalue()
        else:
            frame = struct.pack(">II", 1, 1) + out.getvalue()
        try:
            await target[0].send_bytes(frame)
            self.previewed += 1
        except (ConnectionError, RuntimeError):
            pass

    async def _after_progress(self) -> None:
        n = self.drop_socket_after_steps
        self._since_drop = 0 if n is None else self._since_drop + 1
        if n is not None and self._since_drop >= n and self._client_id in self._conns:
            self.drop_socket_after_steps = None  # once
            _, transport = self._conns.pop(self._client_id)
            if transport is not None:
                transport.abort()  # a dropped connection, not a polite close
        if self.restart_mid_job:
            self.restart_mid_job = False
            self._spawn(self.restart())
            await asyncio.get_running_loop().create_future()  # cancelled by the restart

    # --- what the nodes compute ------------------------------------------------------------

    def _evaluate(self, cls: str, v: dict) -> tuple:
        if cls == "CheckpointLoaderSimple":
            model = {"ckpt_name": v["ckpt_name"], "loras": []}
            return model, dict(model), {"ckpt_name": v["ckpt_name"]}
        if cls == "LoraLoader":
            lora = {"lora_name": v["lora_name"], "strength_model": v["strength_model"],
                    "strength_clip": v["strength_clip"]}
            return ({**v["model"], "loras": v["model"]["loras"] + [lora]},
                    {**v["clip"], "loras": v["clip"]["loras"] + [lora]})
        if cls == "CLIPTextEncode":
            return ({"text": v["text"], "clip": v["clip"], "control": []},)
        if cls == "ConditioningZeroOut":
            return ({**v["conditioning"], "text": "", "zeroed": True},)
        if cls == "EmptyLatentImage":
            return ({"width": v["width"], "height": v["height"], "batch_size": v["batch_size"],
                     "init": None, "info": None},)
        if cls == "LoadImage":
            path = self._input_file(str(v["image"]))
            data = path.read_bytes()
            with Image.open(io.BytesIO(data)) as img:
                width, height = img.size
            sha = _sha(data)
            info = {"image": v["image"], "image_sha256": sha, "width": width, "height": height}
            return ({"width": width, "height": height, "batch_size": 1, "image": v["image"],
                     "sha256": sha, "info": info}, {"mask_of": v["image"]})
        if cls == "VAEEncode":
            px = v["pixels"]
            return ({"width": px["width"], "height": px["height"],
                     "batch_size": px["batch_size"], "init": px, "info": None},)
        if cls == "VAEDecode":
            lat = v["samples"]
            info = lat["info"] or {"width": lat["width"], "height": lat["height"]}
            return ({"width": lat["width"], "height": lat["height"],
                     "batch_size": lat["batch_size"], "image": info.get("image"),
                     "sha256": _sha(json.dumps(info, sort_keys=True)), "info": info},)
        if cls == "ControlNetLoader":
            return ({"control_net_name": v["control_net_name"]},)
        if cls in ("ControlNetApply", "ControlNetApplyAdvanced"):
            net = {"control_net_name": v["control_net"]["control_net_name"],
                   "strength": v["strength"], "image_sha256": v["image"]["sha256"]}
            conds = [v["conditioning"]] if cls == "ControlNetApply" else [v["positive"],
                                                                         v["negative"]]
            return tuple({**c, "control": c["control"] + [net]} for c in conds)
        if cls == "Canny":
            img = v["image"]
            info = {**img["info"], "canny": [v["low_threshold"], v["high_threshold"]]}
            return ({**img, "info": info, "sha256": _sha(json.dumps(info, sort_keys=True))},)
        raise RuntimeError(f"comfyfake cannot run {cls}")

    @staticmethod
    def _sample(v: dict) -> dict:
        lat, pos, model = v["latent_image"], v["positive"], v["model"]
        init = lat.get("init") or {}
        loras = [x["lora_name"] for x in model["loras"]]
        info = {"prompt": pos["text"], "negative": v["negative"]["text"],
                "seed": v["seed"] if "seed" in v else v["noise_seed"], "steps": v["steps"],
                "cfg": v["cfg"], "sampler_name": v["sampler_name"], "scheduler": v["scheduler"],
                "denoise": v.get("denoise", 1.0), "width": lat["width"], "height": lat["height"],
                "batch_size": lat["batch_size"], "ckpt_name": model["ckpt_name"],
                "lora_name": loras[0] if loras else None, "loras": loras,
                "image": init.get("image") or (lat["info"] or {}).get("image"),
                "image_sha256": init.get("sha256") or (lat["info"] or {}).get("image_sha256"),
                "controlnets": [c["control_net_name"] for c in pos.get("control", [])]}
        if lat["info"]:  # a second pass (SDXL refiner): what the first one was
            info["first_pass"] = {k: lat["info"][k] for k in ("prompt", "seed", "ckpt_name")}
        return {**lat, "info": info}

    def _save(self, nid: str, cls: str, v: dict, prompt: dict, extra: dict) -> dict:
        """SaveImage / PreviewImage: `{prefix}_{counter:05}_.png`, counter from the folder."""
        images = v["images"]
        temp = cls == "PreviewImage"
        prefix = str(v.get("filename_prefix", "ComfyUI"))
        if temp:
            prefix += "_temp_" + "".join(random.choice("abcdefghijklmnopqrstupvxyz")
                                         for _ in range(5))
        base = self.dirs["temp" if temp else "output"]
        folder, name, counter, subfolder = _save_path(prefix, base, images["width"],
                                                      images["height"])
        scale = min(1.0, MAX_SIDE / max(images["width"], images["height"]))
        size = (max(1, round(images["width"] * scale)), max(1, round(images["height"] * scale)))
        results = []
        for b in range(images["batch_size"]):
            info = {**images["info"], "batch_index": b, "node": nid}
            meta = PngImagePlugin.PngInfo()
            meta.add_text("prompt", json.dumps(prompt))
            for key, value in (extra.get("extra_pnginfo") or {}).items():
                meta.add_text(key, json.dumps(value))
            meta.add_text("fake_comfy", json.dumps(info))
            filename = f"{name.replace('%batch_num%', str(b))}_{counter:05}_.png"
            Image.new("RGB", size, fake_color(info)).save(folder / filename, pnginfo=meta)
            filename = self._odd_file(folder, filename)
            results.append({"filename": filename, "subfolder": subfolder,
                            "type": "temp" if temp else "output"})
            counter += 1
        if self.hostile in ("webm", "mp4"):
            return {"images": results, "animated": [True]}
        return {"images": results}

    def _odd_file(self, folder: Path, filename: str) -> str:
        """The file a save node of a hostile or broken server leaves instead (hostile=)."""
        png = folder / filename
        stem = filename[:-len(".png")]
        made: dict[str, tuple[str, bytes]] = {
            "html": (".html", media.HTML), "text_png": (".png", media.TEXT),
            "png_named_html": (".html", png.read_bytes()),
            "jpeg": (".png", media.image("JPEG", (8, 8), (10, 120, 200))),
            "webm": (".webm", media.webm()), "mp4": (".mp4", media.mp4()),
            "bomb": (".png", media.bomb_png())}
        if self.hostile not in made:
            return filename
        suffix, data = made[self.hostile]
        png.unlink()
        (folder / f"{stem}{suffix}").write_bytes(data)
        return f"{stem}{suffix}"


def _save_path(prefix: str, out: Path, width: int, height: int) -> tuple[Path, str, int, str]:
    """folder_paths.get_save_image_path: the next counter after the highest one in the folder."""
    if "%" in prefix:
        now = time.localtime()
        for key, value in (("width", width), ("height", height), ("year", now.tm_year),
                           ("month", f"{now.tm_mon:02}"), ("day", f"{now.tm_mday:02}"),
                           ("hour", f"{now.tm_hour:02}"), ("minute", f"{now.tm_min:02}"),
                           ("second", f"{now.tm_sec:02}")):
            prefix = prefix.replace(f"%{key}%", str(value))
    subfolder = os.path.dirname(os.path.normpath(prefix))
    name = os.path.basename(os.path.normpath(prefix))
    folder = out / subfolder
    if not _within(out, folder):
        raise _Failure("Exception", "**** ERROR: Saving image outside the output folder is not "
                       "allowed.\n")
    folder.mkdir(parents=True, exist_ok=True)
    counter, plen = 1, len(os.path.basename(prefix))
    for f in os.listdir(folder):
        head = f[:plen + 1]
        try:
            digits = int(f[plen + 1:].split(".")[0].split("_")[0])
        except ValueError:
            digits = 0
        if os.path.normcase(head[:-1]) == os.path.normcase(name) and head[-1:] == "_":
            counter = max(counter, digits + 1)
    return folder, name, counter, subfolder
