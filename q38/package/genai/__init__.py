"""The genai surface: packages the onnxruntime-genai builder writes.

GenAI 0.18.0's config schema and checks, the config records, the package model, shared
initializers, and its reader behind :mod:`q38.package.interface`.
"""
