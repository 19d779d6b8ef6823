"""Import torchvision beside the CPU build of torch 2.13.0 (FACTS.md).

PyPI's torchvision 0.28.0 ships a CUDA-linked ``_C.so`` that does not load beside
torch 2.13.0+cpu, and ``torchvision/_meta_registrations.py`` then fails with
"operator torchvision::nms does not exist". Defining the two schemas it registers fake
kernels for (``nms``, ``qnms``) first lets the pure-Python parts (all of
``torchvision.models``) import and run on the CPU; detection ops stay unavailable.
(The same shim as ``tests/fixtures/scripts/tvshim.py``, which made the fixtures.)
"""
from __future__ import annotations

import torch

_DEFINED = False


def models():
    """``torchvision.models``, importable here."""
    global _DEFINED
    if not _DEFINED:
        try:
            lib = torch.library.Library("torchvision", "DEF")
            lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            models._lib = lib                  # keep the library (and its schemas) alive
        except RuntimeError:                   # already defined (torchvision's own _C loaded)
            pass
        _DEFINED = True
    import torchvision.models
    return torchvision.models
