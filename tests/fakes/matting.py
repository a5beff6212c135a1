"""A tiny background-removal model written as ONNX, for the keep tests: it reads a
picture as BiRefNet or RMBG-2.0 do (RGB at its own size, ImageNet-normalised) and gives
logits, high where the picture is dark — a dark product on a light background is cut out,
as a real model would cut out a real one."""

from __future__ import annotations

from pathlib import Path


def write_dark_finder(path: Path, side: int = 32) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    picture = helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, side, side])
    logits = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1, side, side])
    weights = [numpy_helper.from_array(np.array(v, dtype=np.float32), name)
               for name, v in (("gain", -10.0), ("bias", 5.0))]
    graph = helper.make_graph([
        helper.make_node("ReduceMean", ["image"], ["grey"], axes=[1], keepdims=1),
        helper.make_node("Mul", ["grey", "gain"], ["scaled"]),
        helper.make_node("Add", ["scaled", "bias"], ["logits"])],
        "dark_finder", [picture], [logits], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
