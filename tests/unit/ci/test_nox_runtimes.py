"""One environment per onnxruntime build (noxfile.py): `nox -s gpu` hands the run to the venv of the
distribution it installs, so the CUDA run and its CPU dry run never share a venv, in either order."""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[3]
GPU_LINE = "GPU 0: NVIDIA H200 (UUID: GPU-5b0c1f3e-0000-4000-8000-000000000000)"


@functools.cache
def _load_noxfile() -> ModuleType:
    """noxfile.py, loaded once (nox refuses a session registered twice)."""
    cwd = os.getcwd()
    os.chdir(ROOT)  # nox reads pyproject.toml from the working directory, as `nox` does
    try:
        spec = importlib.util.spec_from_file_location("q38_noxfile", ROOT / "noxfile.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        os.chdir(cwd)
    return module


def _noxfile(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> ModuleType:
    monkeypatch.chdir(tmp_path)  # the sessions create .benchmarks/gpu in the working directory: not the checkout's
    return _load_noxfile()


class Skipped(Exception):
    pass


class Errored(Exception):
    pass


class FakeSession:
    """What the noxfile's functions ask of a nox session, recorded: installs, runs, hand-overs."""

    def __init__(self, *posargs: str) -> None:
        self.posargs = list(posargs)
        self.installed: list[str] = []
        self.ran: list[tuple[str, ...]] = []
        self.notified: list[tuple[str, list[str]]] = []

    def install(self, *args: str, **_: object) -> None:
        self.installed += args

    def run(self, *args: str, **_: object) -> None:
        self.ran.append(args)

    def log(self, *_: object) -> None:
        pass

    def notify(self, target: str, posargs: list[str] | None = None) -> None:
        self.notified.append((target, list(posargs or [])))

    def skip(self, reason: str) -> None:
        raise Skipped(reason)

    def error(self, reason: str) -> None:
        raise Errored(reason)


def _fake_nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, listing: str | None) -> None:
    """A `nvidia-smi` on PATH that lists ``listing`` for -L (None: no nvidia-smi at all)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if listing is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f'#!/bin/sh\n[ "$1" = -L ] && echo "{listing}"\nexit 0\n', "utf-8")
        smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    monkeypatch.delenv("Q38_ORT_WHEEL", raising=False)


def _ort_dists(installed: list[str]) -> set[str]:
    """The onnxruntime distributions among requirements and wheels (the GenAI clients are other packages)."""
    names = {Path(r).name.split("-")[0].replace("_", "-") if r.endswith(".whl") else r.split("=")[0].split(">")[0]
             for r in installed}
    return {n for n in names if n in ("onnxruntime", "onnxruntime-gpu")}


def _gpu(nf: ModuleType, venvs: dict[str, list[str]], *posargs: str) -> tuple[str, list[str]]:
    """`nox -s gpu -- POSARGS`: the dispatcher, then the session it hands over to, in that session's venv."""
    dispatcher = FakeSession(*posargs)
    nf.gpu(dispatcher)
    assert dispatcher.installed == [] and dispatcher.ran == []  # python=False: installs nothing anywhere
    [(target, handed)] = dispatcher.notified
    runtime = target.removeprefix("gpu-run(").removesuffix(")")
    run = FakeSession(*handed)
    nf.gpu_run(run, runtime=runtime)
    venvs.setdefault(target, []).extend(run.installed)
    assert any(args[:2] == ("pytest", "tests/gpu") for args in run.ran)  # the suite runs: no skip
    return target, run.installed


@pytest.mark.parametrize("order", [("real", "dry", "real"), ("dry", "real", "dry")])
def test_the_gpu_run_and_its_dry_run_never_share_a_venv(order: tuple[str, ...], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    nf = _noxfile(monkeypatch, tmp_path)
    _fake_nvidia_smi(tmp_path, monkeypatch, GPU_LINE)
    assert nf._visible_gpu() == GPU_LINE
    venvs: dict[str, list[str]] = {}
    for step in order:
        target, installed = _gpu(nf, venvs, *(["--dry-run-cpu"] if step == "dry" else []))
        if step == "real":  # a GPU is visible: the real run installs the CUDA build and runs (fails, not skips)
            assert target == "gpu-run(cuda)" and "onnxruntime-gpu==1.31.1" in installed
            assert "onnxruntime-genai-cuda==0.18.0" in installed  # the GenAI release the format targets
        else:
            assert target == "gpu-run(cpu)" and "onnxruntime==1.32.0" in installed
            assert not any(r.startswith("onnxruntime-genai-cuda") for r in installed)
    assert set(venvs) == {"gpu-run(cuda)", "gpu-run(cpu)"}
    assert {name: _ort_dists(reqs) for name, reqs in venvs.items()} == {
        "gpu-run(cuda)": {"onnxruntime-gpu"}, "gpu-run(cpu)": {"onnxruntime"}}


@pytest.mark.parametrize("listing", [None, "No devices were found"])
def test_without_a_visible_gpu_the_real_run_skips_and_the_dry_run_runs(listing: str | None, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    nf = _noxfile(monkeypatch, tmp_path)
    _fake_nvidia_smi(tmp_path, monkeypatch, listing)
    with pytest.raises(Skipped, match="no NVIDIA GPU visible"):
        nf.gpu(FakeSession())
    target, installed = _gpu(nf, {}, "--dry-run-cpu", "-k", "parity")
    assert target == "gpu-run(cpu)" and _ort_dists(installed) == {"onnxruntime"}


def test_a_named_wheel_goes_to_the_venv_of_its_distribution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nf = _noxfile(monkeypatch, tmp_path)
    _fake_nvidia_smi(tmp_path, monkeypatch, GPU_LINE)
    wheel = "/wheels/onnxruntime_gpu-1.33.0.dev1-cp311-cp311-manylinux_2_28_x86_64.whl"
    session = FakeSession(wheel, "-k", "parity")
    nf.gpu(session)
    assert session.notified == [("gpu-run(cuda)", [wheel, "-k", "parity"])]
    run = FakeSession(wheel, "-k", "parity")
    nf.gpu_run(run, runtime="cuda")
    assert wheel in run.installed and _ort_dists(run.installed) == {"onnxruntime-gpu"}
    assert run.ran[-1][-2:] == ("-k", "parity")  # the wheel is not passed on to pytest
    # a CPU build named for the dry run goes to the CPU venv; Q38_ORT_WHEEL is read the same way
    cpu_wheel = "onnxruntime-1.32.0-cp311-cp311-manylinux_2_27_x86_64.whl"
    assert nf._gpu_requirement(["--dry-run-cpu"], cpu_wheel) == ("cpu", cpu_wheel, ["--dry-run-cpu"])
    assert nf._gpu_requirement([], None) == ("cuda", "onnxruntime-gpu==1.31.1", [])
    # the venv of one distribution refuses the other's wheel rather than mixing the two
    with pytest.raises(Errored, match=r"this venv is gpu-run\(cpu\), onnxruntime only"):
        nf.gpu_run(FakeSession(wheel), runtime="cpu")
    with pytest.raises(Errored, match="not onnxruntime-gpu or onnxruntime"):
        nf.gpu(FakeSession("onnxruntime_genai-0.18.0-cp311-cp311-manylinux_2_28_x86_64.whl"))


def test_every_session_of_a_runtime_has_a_venv_of_its_own() -> None:
    """nox keys a venv on the session's name: the runtimes' sessions are distinct names, hence distinct venvs."""
    from nox.sessions import _normalize_path

    listed = subprocess.run([sys.executable, "-m", "nox", "-l", "--json", "-s", "gpu-run", "contracts", "cpu"], cwd=ROOT, capture_output=True,
                            text=True, check=True, timeout=120).stdout
    names = [s["session"] for s in json.loads(listed)]
    runtimes = ["gpu-run(cuda)", "gpu-run(cpu)", "contracts(ort='1.32.0')", "contracts(ort='1.31.1')", "cpu"]
    assert set(runtimes) <= set(names)
    assert len({_normalize_path(".nox", n) for n in runtimes}) == len(runtimes)
