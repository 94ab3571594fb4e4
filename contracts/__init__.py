"""Contracts: onnxruntime session-creation rules and package rules as code (SPEC §6).

One module per surface (``offload_config``, ``offload_nodes``, ``qsa``, ``causal_conv``,
``config_surface``, ``package_layout``); each rule is a :class:`~contracts._rule.Rule` record with a
pure check returning :class:`~contracts._rule.Violation` records; ``runner.check_package`` runs
them all on a package (``q38 check``).
"""

from __future__ import annotations

from contracts._rule import OrtVersions, Rule, Violation

__all__ = ["OrtVersions", "Rule", "Violation"]
