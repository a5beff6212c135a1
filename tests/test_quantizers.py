"""An executor leaves the quantization libraries its models do not use unloaded, and keeps
the one a model names (executor.diffusers.quantizers)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys

import pytest

from executor.diffusers import quantizers


def backend(name: str) -> bool:
    return name.split(".")[0] in quantizers.BACKENDS.values()


@contextlib.contextmanager
def fresh_process():
    """As in a fresh executor process: neither library imported yet. What this test
    process had of them is put back after, and the marks left are taken away (the rest
    of the suite still loads them)."""
    saved = {name: sys.modules.pop(name) for name in [m for m in sys.modules if backend(m)]}
    try:
        yield
    finally:
        for name in [m for m in sys.modules if backend(m)]:
            del sys.modules[name]
        sys.modules.update(saved)


def test_the_libraries_no_model_names_look_absent():
    with fresh_process():
        assert quantizers.leave_unused([None, None]) == ["bitsandbytes", "torchao"]
        for name in ("bitsandbytes", "torchao"):
            assert importlib.util.find_spec(name) is None  # how diffusers asks if one is there
            with pytest.raises(ImportError):
                importlib.import_module(name)
    assert importlib.util.find_spec("torchao") is not None  # (this process: as it was)


def test_a_model_quantized_with_one_keeps_it():
    with fresh_process():
        assert quantizers.leave_unused([None, "fp8"]) == ["bitsandbytes"]
        assert importlib.util.find_spec("torchao") is not None
        assert importlib.util.find_spec("bitsandbytes") is None
        assert quantizers.leave_unused(["nf4", "fp8"]) == []


def test_one_already_imported_is_left_alone():
    with fresh_process():
        sys.modules["torchao"] = importlib.import_module("json")  # (any module: "imported")
        assert quantizers.leave_unused([]) == ["bitsandbytes"]
        assert sys.modules["torchao"] is not None
