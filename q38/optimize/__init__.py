"""``q38 optimize``: guarded rewrites of package graphs into com.microsoft contrib operators.

One pass per module (``rms_norm_rotary``, ``shared_expert``, ``hyper_connection``,
``causal_conv_state``, ``fp8_head``), the pass machinery they share (``_common``: ``RewritePass``
and its ``PassRun`` record) and the helpers their guards match with (``matching``), an explicit
pipeline (``pipeline.PIPELINE``) and the package driver (``driver.optimize_package``).
"""

from __future__ import annotations

from q38.optimize._common import Decline, Outcome, PassRun, RewritePass
from q38.optimize.pipeline import (
    PASS_NAMES,
    PIPELINE,
    OptimizeResult,
    optimize_model,
    select_passes,
)

__all__ = [
    "PASS_NAMES",
    "PIPELINE",
    "Decline",
    "OptimizeResult",
    "Outcome",
    "PassRun",
    "RewritePass",
    "optimize_model",
    "select_passes",
]
