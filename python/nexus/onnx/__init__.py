"""ONNX for Nexus: ``load`` runs ONNX models (exported from PyTorch or elsewhere) with Nexus's
fused kernels, and ``Model.export_onnx`` (``export``) writes a GraphBuilder model as an ONNX file.

Needs the ``onnx`` package (``pip install 'nexus[onnx]'``).

Example:
    >>> m = nx.onnx.load("model.onnx")
    >>> y = m.run(x)
    >>> model.export_onnx("mlp.onnx", opset=17)
"""

from ._export import MAX_OPSET, MIN_OPSET, export
from ._import import MAX_IMPORT_OPSET, MIN_IMPORT_OPSET, InferenceModel, IOInfo, load
from ._ops import UnsupportedError, supported_ops

__all__ = ["MAX_IMPORT_OPSET", "MAX_OPSET", "MIN_IMPORT_OPSET", "MIN_OPSET", "IOInfo", "InferenceModel",
           "UnsupportedError", "export", "load", "supported_ops"]
