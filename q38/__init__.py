"""q38: build, optimize, convert and qualify ONNX Runtime GenAI packages for Qwen3.8-Flash.

Importing ``q38`` is cheap: it imports only the standard library. The heavy modules
(onnx, onnx-ir, numpy, onnxruntime) are imported by the subpackages that need them.
"""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
