"""QMoE offload converter (SPEC §5.3): converter, multi-draft graphs, slot planning, profiles.

Public entry points (imported lazily so that ``q38 offload --help`` needs only the stdlib):

- :func:`q38.offload.convert.convert_package` — ``q38 offload OUT --from-package SRC``;
- :func:`q38.offload.multidraft.build_multidraft` / :class:`MultiDraftPass` — S=2..4 verify graphs;
- :func:`q38.offload.build.emit_multidraft_graphs`, :func:`q38.offload.build.offload_profiles_config`
  — what ``q38 build --multidraft`` / ``--offload-profiles`` call;
- :func:`q38.offload.slots.plan_from_profile`, :func:`q38.offload.slots.uniform_caps`;
- :func:`q38.offload.profiles.build_runtime_profiles`, :func:`apply_offload_config`.
"""

from __future__ import annotations
