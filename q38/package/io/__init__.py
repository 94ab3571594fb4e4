"""File I/O every surface shares; nothing here knows a config surface.

Bounded regular-file reads, path safety, strict JSON, digests, byte copies, the link policy and
staged (atomic) output.
"""
