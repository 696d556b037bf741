"""CPU-only development environments: let torchvision's Python code import beside a CPU torch.

The torchvision wheels reachable for torch 2.13.0+cpu are CUDA-linked; their compiled ops fail to
load and ``import torchvision`` then dies on ``operator torchvision::nms does not exist``.
transformers' video processors only need ``torchvision.transforms.v2.functional``, not those ops.
This module is installed into the development virtual environment by ``scripts/setup-env.sh`` (a
``.pth`` file imports it at start-up); it is not part of any videorl distribution. Before torchvision
is first imported, it defines the two operator schemas torchvision's Python code looks up. It costs
nothing until then: torch is imported only when torchvision is.
"""

from __future__ import annotations

import importlib.abc
import sys
from typing import Any

_LIBRARIES: list[Any] = []


class _DefineTorchvisionOps(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        import torch

        if torch.version.cuda is None and not torch._C._dispatch_has_kernel("torchvision::nms"):
            try:
                lib = torch.library.Library("torchvision", "DEF")
                lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
                _LIBRARIES.append(lib)
            except RuntimeError:
                pass  # already defined: torchvision's own ops loaded
        return None


if not any(isinstance(f, _DefineTorchvisionOps) for f in sys.meta_path):
    sys.meta_path.insert(0, _DefineTorchvisionOps())
