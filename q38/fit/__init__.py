"""``q38 fit``: will a package fit its device, per context tier and runtime profile (issue 29).

:mod:`q38.fit.report` builds the report from the package layer's exact memory model
(:mod:`q38.package.memory`); :mod:`q38.fit.plot` draws it. docs/fit.md describes the numbers.
"""

from __future__ import annotations

from q38.fit.report import Estimate, FitReport, FitRow, fit_package, parse_gpu, parse_size

__all__ = ["Estimate", "FitReport", "FitRow", "fit_package", "parse_gpu", "parse_size"]
