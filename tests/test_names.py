"""Names from outside (hubs, mirrors, ComfyUI servers) checked before they become paths."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.names import UnsafeName, checked, inside, shown

SOURCE = "the hub's file list for org/model"


@pytest.mark.parametrize("name", [
    "model_index.json", "unet/diffusion_pytorch_model.fp16.safetensors", "日本/模型.safetensors",
    "a b/c d.png", "ComfyUI_00001_.png"])
def test_ordinary_names_pass_as_relative_paths(name):
    assert str(checked(name, SOURCE)) == name


@pytest.mark.parametrize(("name", "why"), [
    ("", "empty"), ("../x.json", "leads out"), ("unet/../../x.json", "leads out"),
    ("/etc/passwd", "absolute"), ("C:x.json", "drive"), ("a\\b.json", "backslash"),
    ("a//b", "empty part"), ("./a", "empty part"), ("x\x00y.png", "control"),
    ("x\ny.png", "control"), ("evil\u202egnp.exe", "invisible"), ("x\x1b[31m.png", "control"),
    (" a/b", "space"), ("a./b", "dot"), ("a" * 300, "longer than 255"),
    ("/".join(["abc"] * 400), "longer than 1024")])
def test_hostile_names_are_refused_with_the_name_and_its_source(name, why):
    with pytest.raises(UnsafeName) as e:
        checked(name, SOURCE)
    message = str(e.value)
    assert why in message and SOURCE in message
    assert "\n" not in message and "\x00" not in message and "\x1b" not in message


def test_a_link_on_disk_cannot_lead_a_name_out_of_its_folder(tmp_path):
    folder, outside = tmp_path / "models" / "m", tmp_path / "elsewhere"
    folder.mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, folder / "unet")
    with pytest.raises(UnsafeName, match="link"):
        inside(folder, "unet/config.json", SOURCE)
    assert inside(folder, "vae/config.json", SOURCE) == \
        folder.resolve() / "vae" / "config.json"


@given(st.text(max_size=300))
def test_whatever_passes_stays_inside(name):
    try:
        path = checked(name, SOURCE)
    except UnsafeName as e:
        assert "\n" not in str(e)
        return
    base = "/srv/models/m"
    assert os.path.normpath(os.path.join(base, path)).startswith(base + "/")


@pytest.mark.parametrize("name", [None, 7, ["a"]])
def test_a_name_that_is_not_text_is_refused_as_such(name):
    with pytest.raises(UnsafeName, match="not text"):
        checked(name, SOURCE)


def test_shown_escapes_and_cuts():
    assert shown("a\nb\x00") == "a\\nb\\x00"
    assert len(shown("x" * 500)) == 80
