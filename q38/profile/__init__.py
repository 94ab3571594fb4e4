"""``q38 profile``: which routed experts a workload selects, as an STRP v1 expert profile.

The package runs on the CPU (its ``cpu`` variant, or a real ``-e cpu`` export) over a workload
(:mod:`q38.profile.workload`: prompts of token ids, or text through the package's tokenizer,
each continued greedily for ``--tokens`` tokens). Each QMoE node's router logits (its input 1)
are exposed as extra outputs of an in-memory copy of the graph (:mod:`q38.profile.taps`), and
the node's own rule picks its experts in numpy: the ``k`` largest logits per token (softmax and
normalization do not change which experts are picked; ties go to the lower expert index, as the
CPU kernel does). :mod:`q38.profile.run` steps the graphs with their state carried
(:mod:`q38.profile.stepper`) and counts one row per QMoE node, in the order
:mod:`q38.offload.rows` defines (decoder layers, then the MTP where it runs).

ORT's own counters (``session.enable_moe_expert_counting``) only log, per run, the *set* of
experts a node used and a decayed average; they agree with these counts on one-token decode
steps (a test cross-checks them) but cannot give per-token counts of a prompt, so they are not
the source.
"""

from __future__ import annotations
