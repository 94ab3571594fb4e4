"""The GitHub Actions workflows (.github/workflows) call nox sessions and the project's scripts, never
their logic, name only sessions the noxfile has, and their matrices cover every shard and package."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
WORKFLOWS = ROOT / ".github" / "workflows"
EXPECTED = {"ci.yml", "gpu.yml", "release.yml", "package-check.yml", "goldens.yml"}
# What a step may not do itself: run the tests, q38 or the project's scripts around nox (the
# sessions install and run them; a copy here would drift from noxfile.py).
DUPLICATED_LOGIC = [r"\bpytest\b", r"(^|[\s;&|])q38\s", r"pip install[^\n]*\s\.(\[|\s|$)", r"mutate\.py",
                    r"shard_union\.py", r"wheelhouse\.py", r"q38gpu_\w+\.py", r"\bruff\b", r"\bmypy\b"]
NOX_SESSION = re.compile(r"""\bnox\s+-s\s+("[^"]+"|'[^']+'|\S+)""")
PROJECT_SCRIPTS = ("tests/gpu/run-offline.sh",)


def _load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((WORKFLOWS / name).read_text("utf-8"))
    assert isinstance(data, dict)
    return data


def _runs(workflow: dict[str, Any]) -> list[tuple[str, str]]:
    return [(job_name, step["run"]) for job_name, job in workflow["jobs"].items()
            for step in job.get("steps", []) if "run" in step]


def test_the_five_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS.glob("*.yml")} == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_job_calls_nox_or_a_project_script_and_never_their_logic(name: str) -> None:
    workflow = _load(name)
    for job_name, job in workflow["jobs"].items():
        runs = [step["run"] for step in job.get("steps", []) if "run" in step]
        assert any(NOX_SESSION.search(r) or any(s in r for s in PROJECT_SCRIPTS) for r in runs), (name, job_name)
    for job_name, run in _runs(workflow):
        for pattern in DUPLICATED_LOGIC:
            assert not re.search(pattern, run, re.MULTILINE), (name, job_name, pattern, run)


def test_every_nox_session_a_workflow_names_exists() -> None:
    named = sorted({m.group(1).strip("'\"") for name in EXPECTED for _, run in _runs(_load(name))
                    for m in NOX_SESSION.finditer(run)})
    assert {"lint", "cpu", "shard-union", "mutation", "gpu-wheelhouse", "bench", "check", "goldens"} <= {
        re.sub(r"\(.*", "", n) for n in named}
    concrete = [n for n in named if "${{" not in n]
    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-s", *concrete], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert {s["session"] for s in json.loads(listed.stdout)} >= set(concrete)
    # the contracts matrix expands to the parametrized sessions the noxfile defines
    contracts = _load("ci.yml")["jobs"]["contracts"]["strategy"]["matrix"]["ort"]
    sessions = [f"contracts(ort='{v}')" for v in contracts]
    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-s", *sessions], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=120)
    assert listed.returncode == 0 and sorted(contracts) == ["1.31.1", "1.32.0"], listed.stderr


def test_the_cpu_matrix_runs_every_shard_on_every_python() -> None:
    ci = _load("ci.yml")
    shards = int(ci["env"]["SHARDS"])
    matrix = ci["jobs"]["cpu"]["strategy"]["matrix"]
    assert matrix["group"] == list(range(1, shards + 1)) and shards > 1
    assert matrix["python"] == ["3.11", "3.12", "3.13"]
    assert ci["jobs"]["cpu-union"]["strategy"]["matrix"]["python"] == matrix["python"]
    [run] = [s["run"] for s in ci["jobs"]["cpu"]["steps"] if "nox -s cpu" in s.get("run", "")]
    assert '--splits "$SHARDS"' in run and '--group "${{ matrix.group }}"' in run and "--junitxml=" in run
    assert "!cancelled()" in ci["jobs"]["cpu-union"]["if"]  # the union runs when a shard failed too


def test_the_mutation_matrix_shards_every_target_package() -> None:
    sys.path.insert(0, str(ROOT / "tests" / "mutation"))
    import mutate

    job = _load("ci.yml")["jobs"]["mutation"]
    matrix = job["strategy"]["matrix"]
    assert sorted(matrix["package"]) == sorted(mutate.TARGETS)
    [run] = [s["run"] for s in job["steps"] if "nox -s mutation" in s.get("run", "")]
    parts = int(re.search(r"--shard \"\$\{\{ matrix.shard \}\}/(\d+)\"", run).group(1))  # type: ignore[union-attr]
    assert matrix["shard"] == list(range(1, parts + 1))
    merge = [s["run"] for s in _load("ci.yml")["jobs"]["mutation-score"]["steps"] if "--merge" in s.get("run", "")]
    assert merge


def test_the_gpu_workflow_runs_each_gpu_class_on_its_own_runner() -> None:
    gpu = _load("gpu.yml")
    job = gpu["jobs"]["gpu"]
    assert job["runs-on"][0] == "self-hosted" and "${{ matrix.class }}" in job["runs-on"]
    default = json.loads(gpu[True]["workflow_dispatch"]["inputs"]["classes"]["default"])  # YAML reads `on:` as True
    labels = yaml.safe_load((ROOT / ".github" / "actionlint.yaml").read_text("utf-8"))["self-hosted-runner"]["labels"]
    assert default == ["h200", "h100", "consumer"] and set(default) <= set(labels)
    assert {"schedule", "workflow_dispatch"} <= set(gpu[True])
