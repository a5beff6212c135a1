"""`genbot models pull` against a Hugging Face Hub on loopback (tests/fakes/hub.py, reached
through HF_ENDPOINT as a mirror would be): what a diffusers folder needs and nothing
else, a pull cut short resumed by the next run, gated repos, wrong hashes, direct URLs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from bot.cli import main
from storage import config as cfg
from storage.names import shown
from templates.settings import model_path, models
from tests.fakes.hub import HOSTILE_NAMES, FakeHub

WEIGHTS = os.urandom(3 * 2**20 + 123)  # several read chunks, not a round number
HALF = os.urandom(2**20)
REPO = {
    "model_index.json": json.dumps({"_class_name": "StableDiffusionPipeline"}).encode(),
    "unet/config.json": b'{"sample_size": 64}',
    "unet/diffusion_pytorch_model.safetensors": WEIGHTS,
    "unet/diffusion_pytorch_model.fp16.safetensors": HALF,
    "unet/diffusion_pytorch_model.bin": b"pickled twin" * 10,
    "tokenizer/merges.txt": b"#version: 0.2\na b\n",
    "v1-5-pruned.ckpt": b"a whole-model pickle",
    "unet/flax_model.msgpack": b"flax",
    ".gitattributes": b"*.safetensors filter=lfs",
}


@pytest.fixture
def hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("HF_TOKEN", "GENBOT_CONFIG", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # no saved login
    with FakeHub.running() as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        yield server


def pull(capsys, *argv) -> tuple[int, str, str]:
    code = main(["models", "pull", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_diffusers_repo_brings_its_configs_and_safetensors_weights_only(hub, tmp_path,
                                                                          capsys):
    commit = hub.add_repo("org/tiny-sd", REPO)
    code, out, err = pull(capsys, "org/tiny-sd")
    assert code == 0, err
    folder = tmp_path / "data" / "models" / "tiny-sd"
    got = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert got == ["model_index.json", "tokenizer/merges.txt", "unet/config.json",
                   "unet/diffusion_pytorch_model.safetensors"]
    assert (folder / "unet/diffusion_pytorch_model.safetensors").read_bytes() == WEIGHTS
    size = (len(WEIGHTS) + sum(len(REPO[f]) for f in got[:3])) / 2**20
    assert out.splitlines()[0] == \
        f"pulling org/tiny-sd@{commit[:12]} into {folder}: 4 file(s), {size:.1f} MB"
    assert out.splitlines()[-1] == f'  tiny-sd = "{folder}"'
    # Again: everything is there and verified, nothing is fetched.
    before = len(hub.requests)
    assert pull(capsys, "org/tiny-sd")[0] == 0
    assert not [r for r in hub.requests[before:] if r[0] == "GET" and "/resolve/" in r[1]]


def test_a_variant_replaces_the_full_weights(hub, tmp_path, capsys):
    hub.add_repo("org/tiny-sd", REPO)
    code, out, err = pull(capsys, "org/tiny-sd", "--variant", "fp16", "--name", "half")
    assert code == 0, err
    unet = tmp_path / "data" / "models" / "half" / "unet"
    assert sorted(p.name for p in unet.iterdir()) == [
        "config.json", "diffusion_pytorch_model.fp16.safetensors"]


def test_a_pull_cut_short_is_resumed_by_the_next_run_with_a_range(hub, tmp_path, capsys):
    hub.add_repo("org/one", {"model.safetensors": WEIGHTS})
    hub.cut_after_bytes, hub.cut_times = 2**20 + 7, 3  # every try of this run is cut
    code, out, err = pull(capsys, "org/one")
    assert code == 1
    assert "model.safetensors: the download stopped after" in err
    assert "run the same command again to resume it" in err
    partial = tmp_path / "data" / "models" / "one" / "model.safetensors.partial"
    kept = partial.stat().st_size
    assert 0 < kept < len(WEIGHTS)
    code, out, err = pull(capsys, "org/one")
    assert code == 0, err
    ranges = [r[2] for r in hub.requests if r[0] == "GET" and r[2]]
    assert ranges[-1] == f"bytes={kept}-"  # continued, not started again
    target = tmp_path / "data" / "models" / "one" / "model.safetensors"
    assert target.read_bytes() == WEIGHTS and not partial.exists()
    assert out.splitlines()[-1] == f'  one = "{target}"'  # one file: the file itself


def test_a_gated_repo_says_what_to_do_and_a_token_opens_it(hub, capsys, monkeypatch):
    hub.add_repo("corp/gated", {"model.safetensors": WEIGHTS}, gated=True)
    hub.tokens = {"hf_good"}
    code, out, err = pull(capsys, "corp/gated")
    assert code == 1 and "Traceback" not in err
    assert err.strip() == ("genbot: corp/gated is gated: accept its licence on its page on "
                           "the hub (signed in), then set HF_TOKEN to a read token of that "
                           "account")
    monkeypatch.setenv("HF_TOKEN", "hf_wrong")
    assert "is gated" in pull(capsys, "corp/gated")[2]
    monkeypatch.setenv("HF_TOKEN", "hf_good")
    code, out, err = pull(capsys, "corp/gated")
    assert code == 0, err
    assert any(r[3] == "Bearer hf_good" for r in hub.requests if "/resolve/" in r[1])


def test_a_file_that_does_not_hash_right_is_refused_and_deleted(hub, tmp_path, capsys):
    hub.add_repo("org/one", {"model.safetensors": WEIGHTS})
    hub.corrupt = {"model.safetensors"}
    code, out, err = pull(capsys, "org/one")
    assert code == 1
    assert "model.safetensors: the file's sha256 does not match the hub" in err
    folder = tmp_path / "data" / "models" / "one"
    assert not any(folder.iterdir())  # neither the file nor its partial stays


def test_errors_name_what_is_missing(hub, capsys):
    hub.add_repo("org/one", {"a.safetensors": b"x", "b.safetensors": b"y"})
    assert pull(capsys, "org/nope")[2].startswith("genbot: no model repo org/nope at http://")
    assert pull(capsys, "org/one", "--revision", "v9")[2].strip() == \
        "genbot: org/one has no revision 'v9'"
    assert pull(capsys, "org/one", "--file", "c.safetensors")[2].startswith(
        "genbot: org/one has no file 'c.safetensors'; it has: a.safetensors, b.safetensors")
    assert pull(capsys, "org/one")[2].strip() == (
        "genbot: org/one is not a diffusers folder: name one file with --file "
        "(a.safetensors, b.safetensors)")
    code, _, err = pull(capsys, "org/one", "--file", "b.safetensors", "--name", "bee")
    assert code == 0, err


def test_a_direct_url_resumes_and_checks_the_given_sha256(hub, tmp_path, capsys):
    url = hub.add_static("dreamshaper_8.safetensors", WEIGHTS)
    good = hashlib.sha256(WEIGHTS).hexdigest()
    code, out, err = pull(capsys, url, "--sha256", "0" * 64)
    assert code == 1 and "sha256 does not match the one given" in err
    hub.cut_after_bytes, hub.cut_times = 2**20, 3  # each try of the run is cut, each resumed
    assert pull(capsys, url, "--sha256", good)[0] == 1
    target = tmp_path / "data" / "models" / "dreamshaper_8" / "dreamshaper_8.safetensors"
    kept = target.with_name(target.name + ".partial").stat().st_size
    assert [r[2] for r in hub.requests if r[0] == "GET"][-3:] == [
        None, "bytes=1048576-", "bytes=2097152-"]
    code, out, err = pull(capsys, url, "--sha256", good)
    assert code == 0, err
    assert target.read_bytes() == WEIGHTS
    assert [r[2] for r in hub.requests if r[0] == "GET"][-1] == f"bytes={kept}-"
    assert not any(r[3] for r in hub.requests if r[1].startswith("/static/"))  # no token sent


def test_write_adds_the_line_to_the_config_and_it_loads(hub, tmp_path, capsys):
    hub.add_repo("org/one", {"model.safetensors": WEIGHTS})
    (tmp_path / "config.toml").write_text('[queue]\nmax_queue_size = 50\n\n[models]\n'
                                          'sdxl = "demo:sdxl"\n')
    code, out, err = pull(capsys, "org/one", "--name", "mine", "--write")
    assert code == 0, err
    target = tmp_path / "data" / "models" / "mine" / "model.safetensors"
    assert out.splitlines()[-1] == \
        f'added to [models] in config.toml: mine = "{target}"'
    config = cfg.load("config.toml", env={})
    assert model_path(config, models(config)["mine"]) == target
    assert config.queue.max_queue_size == 50 and "sdxl" in models(config)
    assert pull(capsys, "org/one", "--name", "mine", "--write")[0] == 0  # the line replaced
    assert (tmp_path / "config.toml").read_text().count("mine =") == 1


def test_a_single_model_repo_such_as_a_controlnet_is_pulled_as_a_folder(hub, tmp_path, capsys):
    """config.json at the root (lllyasviel/sd-controlnet-canny): the folder the registry
    reads; older repos have .bin weights only, which then come too (safetensors win)."""
    hub.add_repo("lllyasviel/sd-controlnet-canny", {
        "config.json": b'{"_class_name": "ControlNetModel"}',
        "diffusion_pytorch_model.bin": b"weights" * 100, "README.md": b"# canny",
        "images/example.png": b"png"})
    code, out, err = pull(capsys, "lllyasviel/sd-controlnet-canny", "--name", "canny_sd15")
    assert code == 0, err
    folder = tmp_path / "data" / "models" / "canny_sd15"
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [
        "README.md", "config.json", "diffusion_pytorch_model.bin"]
    assert out.splitlines()[-1] == f'  canny_sd15 = "{folder}"'


def test_a_pull_goes_online_even_where_the_hub_library_was_told_offline(hub, capsys,
                                                                        monkeypatch):
    """Executors run with HF_HUB_OFFLINE=1, and so do people who work offline; a pull is
    asked for explicitly."""
    from huggingface_hub import constants
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    hub.add_repo("org/one", {"model.safetensors": WEIGHTS})
    assert pull(capsys, "org/one")[0] == 0
    assert constants.HF_HUB_OFFLINE is True  # as it was, afterwards


def files_under(folder: Path) -> set[str]:
    """Every file and link under `folder` but the hub library's home."""
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")
            if (p.is_file() or p.is_symlink()) and "hf-home" not in p.parts}


WHY = {"../x.json": "it leads out of its folder", "/abs.json": "it is an absolute path",
       "unet/../../x.safetensors": "it leads out of its folder",
       "unet/x\0.json": "it holds a control or invisible character",
       "../../outside/model.safetensors": "it leads out of its folder"}


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_name_a_hostile_mirror_lists_is_refused_and_nothing_lands_outside(
        hub, tmp_path, capsys, name):
    """The mirror lists the name and serves whatever path it leads to; the pull stops
    before writing anything, in one line naming the file and the listing it came from."""
    hub.add_hostile_repo("org/evil", name)
    (tmp_path / "outside").mkdir()
    before = files_under(tmp_path)
    code, out, err = pull(capsys, "org/evil")
    assert code == 1
    assert err == (f'genbot: refused the file name "{shown(name)}" from the file list of '
                   f"org/evil at {hub.url}: {WHY[name]}\n")
    assert files_under(tmp_path) == before
    assert not Path("/abs.json").exists() and not Path("/abs.json.partial").exists()
    assert not [r for r in hub.requests if "/resolve/" in r[1]]  # nothing was fetched
    # Asked for by name, the same.
    code, out, err = pull(capsys, "org/evil", "--file", name)
    assert code == 1 and WHY[name] in err and files_under(tmp_path) == before


def test_the_hostile_mirror_would_have_written_outside_had_its_names_been_trusted(hub):
    """The mode above is not vacuous: the path `../x.json` leads a client to is served."""
    import urllib.request
    commit = hub.add_hostile_repo("org/evil", "../x.json", b"planted")
    with urllib.request.urlopen(f"{hub.url}/org/evil/resolve/{commit}/../x.json") as r:
        assert r.read() == b"planted"


@pytest.mark.parametrize("planted", ["unet", "model_index.json.partial"])
def test_a_link_planted_in_the_models_folder_cannot_lead_a_pull_out(hub, tmp_path, capsys,
                                                                    planted):
    hub.add_repo("org/tiny-sd", REPO)
    folder = tmp_path / "data" / "models" / "tiny-sd"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (folder / planted).symlink_to(outside if planted == "unet" else outside / "taken")
    code, out, err = pull(capsys, "org/tiny-sd")
    assert code == 1
    named = "unet/config.json" if planted == "unet" else planted
    assert err == (f'genbot: refused the file name "{named}" from the file list of '
                   f"org/tiny-sd at {hub.url}: a link on disk leads it out of its folder\n")
    assert list(outside.iterdir()) == []
    assert files_under(folder) == {planted}  # nothing fetched: every target checked first


def test_a_url_whose_name_leads_out_is_refused(hub, tmp_path, capsys):
    code, out, err = pull(capsys, f"{hub.url}/static/a/..", "--name", "m")
    assert code == 1
    assert err == (f'genbot: refused the file name ".." from the address {hub.url}/static/a/..: '
                   "it leads out of its folder\n")
    assert not (tmp_path / "data").exists()


def test_a_name_that_clashes_on_disk_is_one_line_and_leaves_no_partial(hub, tmp_path, capsys):
    """A file where the listing wants a folder: the file system's refusal, said plainly."""
    hub.add_repo("org/tiny-sd", REPO)
    folder = tmp_path / "data" / "models" / "tiny-sd"
    folder.mkdir(parents=True)
    (folder / "tokenizer").write_bytes(b"a file, not a folder")
    code, out, err = pull(capsys, "org/tiny-sd")
    assert code == 1 and "Traceback" not in err
    assert err.startswith(f"genbot: tokenizer/merges.txt: cannot write {folder}/tokenizer/")
    assert not list(folder.rglob("*.partial"))


def _flux_gguf() -> bytes:
    """A GGUF with FLUX.1's tensor names in Black Forest Labs' layout (what city96's
    FLUX.1-dev-gguf files hold; genbot tells a file by its tensor table), written by the
    `gguf` package."""
    import tempfile

    import gguf
    import numpy as np
    writer = gguf.GGUFWriter(path=None, arch="flux")
    for name in ("img_in.weight", "double_blocks.0.img_attn.norm.key_norm.scale",
                 "guidance_in.in_layer.weight"):
        writer.add_tensor(name, np.zeros((4, 8), np.float32))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.gguf"
        writer.write_header_to_file(path)
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def test_a_transformer_file_is_written_with_the_folder_it_runs_with(hub, tmp_path, capsys):
    """A FLUX GGUF pulled on its own needs a FLUX.1 diffusers folder for the rest: --write
    names the configured one (config = …), or the one --config-from gives; with none, the
    plain line and a note saying what to add. The line loads."""
    hub.add_repo("city96/FLUX.1-dev-gguf", {"flux1-dev-Q8_0.gguf": _flux_gguf()})
    base = tmp_path / "FLUX.1-dev"
    base.mkdir()
    (base / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    (tmp_path / "config.toml").write_text("[models]\n")
    code, out, err = pull(capsys, "city96/FLUX.1-dev-gguf", "--file", "flux1-dev-Q8_0.gguf",
                          "--name", "flux_q8", "--write")
    assert code == 0, err
    assert "flux1-dev-Q8_0.gguf is a FLUX.1 transformer on its own: it runs with a diffusers " \
        "folder of FLUX.1" in out
    target = tmp_path / "data" / "models" / "flux_q8" / "flux1-dev-Q8_0.gguf"
    assert out.splitlines()[-1] == f'added to [models] in config.toml: flux_q8 = "{target}"'

    (tmp_path / "config.toml").write_text(f'[models]\nflux_dev = "{base}"\n')
    code, out, err = pull(capsys, "city96/FLUX.1-dev-gguf", "--file", "flux1-dev-Q8_0.gguf",
                          "--name", "flux_q8", "--write")
    assert code == 0, err
    assert out.splitlines()[-1] == (f'added to [models] in config.toml: flux_q8 = {{ path = '
                                    f'"{target}", config = "{base}" }}')
    config = cfg.load("config.toml", env={})
    assert models(config)["flux_q8"].config == str(base)

    code, out, err = pull(capsys, "city96/FLUX.1-dev-gguf", "--file", "flux1-dev-Q8_0.gguf",
                          "--name", "flux_q8", "--config-from", "flux_dev")
    assert code == 0 and f'config = "{base}"' in out.splitlines()[-1]
    code, out, err = pull(capsys, "city96/FLUX.1-dev-gguf", "--file", "flux1-dev-Q8_0.gguf",
                          "--name", "flux_q8", "--config-from", str(tmp_path))
    assert code == 1
    assert err.strip() == f"genbot: --config-from {tmp_path}: not a diffusers folder (no " \
        "model_index.json)"


def test_a_background_removal_model_is_pulled_as_one_onnx_file(hub, tmp_path, capsys):
    """`genbot models pull briaai/RMBG-2.0 --file onnx/model.onnx --write`: the ONNX file,
    hashed as any other, named after its repo, its [models] line read as a matting model
    (what [executor] matting names)."""
    from executor.models.registry import Registry
    from tests.fakes.matting import write_dark_finder
    onnx_bytes = write_dark_finder(tmp_path / "m.onnx").read_bytes()
    hub.add_repo("briaai/RMBG-2.0", {"onnx/model.onnx": onnx_bytes, "README.md": b"#"})
    (tmp_path / "config.toml").write_text("[models]\n")
    code, out, err = pull(capsys, "briaai/RMBG-2.0", "--file", "onnx/model.onnx",
                          "--name", "rmbg", "--write")
    assert code == 0, err
    config = cfg.load("config.toml", env={})
    info = Registry(config).get("rmbg", "matting")
    assert info.path.read_bytes() == onnx_bytes and info.path.suffix == ".onnx"


def test_an_ip_adapter_is_pulled_file_by_file_into_one_folder(hub, tmp_path, capsys,
                                                              demo_models):
    """docs/models.md's recipe: the adapter's weights and its image encoder's two files from
    h94/IP-Adapter into one --dir; the folder they make is read as an SD 1.5 IP-Adapter."""
    from executor.models.registry import Registry
    demo = demo_models / "ip_sd15"
    files = {"models/ip-adapter_sd15.safetensors": (demo / "ip-adapter.safetensors").read_bytes(),
             "models/image_encoder/config.json": (demo / "image_encoder" / "config.json")
             .read_bytes(),
             "models/image_encoder/model.safetensors": (demo / "image_encoder" /
                                                        "model.safetensors").read_bytes()}
    hub.add_repo("h94/IP-Adapter", files)
    for name in files:
        code, _, err = pull(capsys, "h94/IP-Adapter", "--file", name, "--dir",
                            str(tmp_path / "ip_sd15"))
        assert code == 0, err
    config = cfg.from_dict({"service": {"data_dir": str(tmp_path / "data")},
                            "models": {"ip": str(tmp_path / "ip_sd15" / "models")}})
    info = Registry(config).get("ip", "ip_adapter")
    assert info.path.name == "ip-adapter_sd15.safetensors"


def test_a_segmentation_model_repo_is_pulled_whole_and_finds_a_region(hub, tmp_path, capsys):
    """CIDAS/clipseg-rd64-refined's layout (transformers: config.json, weights, processor
    and tokenizer files at the root, .bin beside .safetensors): pulled as a folder the
    registry tells as a segmentation model, which then finds a region named in words."""
    import numpy as np
    from PIL import Image

    from executor.models import segmentation
    from executor.models.registry import Registry
    from tests.fakes.segmentation import write_clipseg
    picture = Image.fromarray(np.random.default_rng(5).integers(0, 256, (40, 40, 3), np.uint8))
    built = write_clipseg(tmp_path / "built", tuned=(picture, "the bottle"))
    files = {p.name: p.read_bytes() for p in built.iterdir()}
    hub.add_repo("CIDAS/clipseg-rd64-refined",
                 {**files, "pytorch_model.bin": b"the same weights, pickled", "README.md": b"#"})
    code, out, err = pull(capsys, "CIDAS/clipseg-rd64-refined", "--name", "clipseg",
                          "--write")
    assert code == 0, err
    folder = tmp_path / "data" / "models" / "clipseg"
    assert sorted(p.name for p in folder.iterdir()) == sorted([*files, "README.md"])  # (no .bin)
    config = cfg.load("config.toml", env={})
    info = Registry(config).get("clipseg", "segmentation")
    found = np.asarray(segmentation.region(info.path, picture, "the bottle")) == 255
    assert 0 < found.mean() < 1
