"""The v12b surface: q38's own packages (``model.type`` ``qwen38_flash_graph``).

Its config records and parser, package model and writer, weights pool, and its reader behind
:mod:`q38.package.interface`.
"""
