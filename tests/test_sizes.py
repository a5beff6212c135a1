"""Intake's size bound reads each op's declared size rule, never its name: a new op that
makes images bigger is bounded like the shipped ones, and an op without a rule is refused."""

from __future__ import annotations

import pytest

from templates import signatures
from templates.jobs import DiffusersJob, Step
from templates.signatures import OPS, Input, Signature, check_signatures
from templates.size_rules import Given, Same, Scaled, Width, sized
from templates.sizes import largest_image


def job(*nodes: Step) -> DiffusersJob:
    return DiffusersJob(template="t", row=2, params={}, nodes=list(nodes), outputs={})


def ref(node: str) -> dict:
    return {"@": f"{node}.image"}


def test_a_new_op_that_makes_images_bigger_is_bounded_by_its_declared_rule(monkeypatch):
    """Before the rules, an op the size reader did not name counted as "no bigger than
    what came in": an outpaint to 8192² slipped past [intake] max_output_pixels."""
    monkeypatch.setitem(OPS, "outpaint", Signature(
        "outpaint", "Extend the canvas.", {"image": Input("image"), "size": Input("size")},
        {"image": "image"}, (Given(),)))
    monkeypatch.setitem(OPS, "mirror", Signature(
        "mirror", "Flip.", {"image": Input("image")}, {"image": "image"}, (Same(),)))
    bound = job(Step("gen", "generate", {"size": [512, 512]}),
                Step("out", "outpaint", {"image": ref("gen"), "size": [8192, 8192]}),
                Step("flip", "mirror", {"image": ref("out")}))
    assert largest_image(bound) == (8192, 8192)


def test_an_op_without_a_size_rule_is_refused_by_name():
    ops = {**OPS, "blur": Signature("blur", "Blur.", {"image": Input("image")},
                                    {"image": "image"})}
    with pytest.raises(RuntimeError, match="without a size rule .*: blur"):
        check_signatures(ops)
    check_signatures(OPS)  # every shipped op has one


def test_the_executor_refuses_an_op_without_a_size_rule(monkeypatch):
    from executor.diffusers.ops import base
    monkeypatch.setitem(signatures.OPS, "upscale",
                        Signature("upscale", "x", OPS["upscale"].inputs, {"image": "image"}))
    with pytest.raises(RuntimeError, match="upscale"):
        base.check_registry()


@pytest.mark.parametrize("nodes, expected", [
    # generate: its size, else its init image's, else the model's own (unknown)
    ([Step("g", "generate", {"size": [640, 480]})], (640, 480)),
    ([Step("g", "generate", {"size": None})], None),
    # resize: a size, a width by an aspect, a width keeping proportions, a factor
    ([Step("g", "generate", {"size": [400, 200]}),
      Step("r", "resize", {"image": ref("g"), "width": 800, "aspect": "1:2"})], (800, 1600)),
    ([Step("g", "generate", {"size": [400, 200]}),
      Step("r", "resize", {"image": ref("g"), "width": 800})], (800, 400)),
    ([Step("g", "generate", {"size": [400, 200]}),
      Step("r", "resize", {"image": ref("g"), "scale": 3})], (1200, 600)),
    # upscale: by its scale, 2 when left out; pad: to its size; crop and text: the same
    ([Step("g", "generate", {"size": [100, 100]}),
      Step("u", "upscale", {"image": ref("g")})], (200, 200)),
    ([Step("g", "generate", {"size": [100, 100]}),
      Step("p", "pad", {"image": ref("g"), "size": [300, 300]}),
      Step("c", "crop", {"image": ref("p"), "aspect": "1:1"}),
      Step("t", "text", {"image": ref("c"), "text": "hi"})], (300, 300)),
    # an uploaded picture's size is unknown here (bounded when it is read)
    ([Step("u", "upscale", {"image": "assets/bottle.png", "scale": 4})], None),
])
def test_each_shipped_rule_sizes_as_its_op_does(nodes, expected):
    assert largest_image(job(*nodes)) == expected


def test_the_first_rule_that_knows_a_size_wins():
    rules = (Given(), Width(), Scaled(default=2.0))
    assert sized(rules, {"size": [10, 20], "width": 99}, (1, 1)) == (10, 20)
    assert sized(rules, {"width": 30, "aspect": "3:1"}, None) == (30, 10)
    assert sized(rules, {"width": 30, "aspect": "bad"}, (10, 5)) == (30, 15)
    assert sized(rules, {}, (10, 5)) == (20, 10)
    assert sized(rules, {}, None) is None
