"""ONNX for Nexus models: ``Model.export_onnx`` (``nexus.onnx.export``) writes a GraphBuilder
model's inference graph as an ONNX file that onnxruntime and other ONNX engines run.

Needs the ``onnx`` package (``pip install 'nexus[onnx]'``).

Example:
    >>> model.export_onnx("mlp.onnx", opset=17)
"""

from ._export import MAX_OPSET, MIN_OPSET, export

__all__ = ["MAX_OPSET", "MIN_OPSET", "export"]
