"""Nexus: a compiled ML framework with a C++ tensor runtime and autograd.

    import nexus as nx
    g = nx.GraphBuilder(seed=0)
    g.input("features", nx.Shape(32, 64)).dense(256, "relu").dense(10, "softmax")
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
"""

from . import _C
from . import cuda  # noqa: F401  (nx.cuda: devices; loads the CUDA backend where it is built)
from . import data  # noqa: F401  (nx.data: readers and the DataLoader)
from . import tensor as _tensor  # noqa: F401  (attaches Python methods to Tensor)
from ._C import NexusError, Tensor, device
from ._C import get_num_threads, set_num_threads
from ._dtype import bfloat16, dtype, float16, float32, float64, int32, int64
from ._dtype import bool_ as bool  # noqa: A001  (nx.bool, as torch.bool)
from ._info import info
from .autograd import is_grad_enabled, no_grad
from .functional import *  # noqa: F403
from .functional import __all__ as _functional_all
from . import optim  # noqa: E402  (nx.optim: SGD, Adam, AdamW, schedules)
from .graph import Activation, GraphBuilder, Shape
from .model import History, Model
from .checkpoint import load
from .jit import TraceError, jit
from . import onnx  # noqa: E402,F401  (nx.onnx: load and export; imports the onnx package only when used)
from .scheduler import BatchSize, ClusterConfig, DeviceType, Epochs, Scheduler

__version__ = _C.build_info()["version"]

__all__ = [
    "Tensor", "NexusError", "device", "cuda", "dtype", "float32", "float64", "float16", "bfloat16", "int32", "int64",
    "bool", "info", "no_grad", "is_grad_enabled", "get_num_threads", "set_num_threads",
    "optim", "data", "GraphBuilder", "Shape", "Activation", "Model", "History", "load", "jit", "TraceError",
    "Scheduler", "ClusterConfig", "DeviceType", "Epochs", "BatchSize",
    *_functional_all,
]
