"""Cross-check of q38 profile's selection rule against ORT's own expert counters.

ORT 1.32.0 CPU logs, per QMoE run, the set of experts the kernel used
(``session.enable_moe_expert_counting`` + ``_statistics``, ``moe_expert_counters`` records at
INFO). Invariant: for every node and every run, that set is exactly the union of the router
taps' top-k picks (ties to the lower index) over the run's rows — one-token decode steps give
the k experts of that token. So the rule ``q38.profile`` applies to the logits is the kernel's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from support.profile_kit import ort_counter_records

TESTS = Path(__file__).resolve().parents[2]
REPO = TESTS.parent
_CHILD = """
import json, sys
import numpy as np
from pathlib import Path
from support.profile_kit import ort_counter_runs
steps = [np.array([[5, 6, 7, 8]]), np.array([[9]]), np.array([[11]]), np.array([[300]])]
picked, names = ort_counter_runs(Path(sys.argv[1]), steps)
print(json.dumps({"names": names, "picked": [[p.tolist() for p in node] for node in picked]}))
"""


def test_ort_counters_agree_with_the_router_taps(tiny_builder_cpu_package: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    child = subprocess.run([sys.executable, "-c", _CHILD, str(tiny_builder_cpu_package / "model.onnx")],
                           capture_output=True, text=True, check=True, env=env)
    result = json.loads(child.stdout)
    records = ort_counter_records(child.stderr)
    names = result["names"]
    assert len(records) == len(names) * 4  # one record per QMoE node per run
    for step in range(4):
        runs = records[step * len(names):(step + 1) * len(names)]
        assert [r["node_name"] for r in runs] == names
        for record, picks in zip(runs, result["picked"]):
            ours = np.array(picks[step]).reshape(-1)
            assert set(record["selected_experts"]) == set(ours.tolist()), (step, record["node_name"])
            if step:  # one token: exactly k experts
                assert len(record["selected_experts"]) == 2
