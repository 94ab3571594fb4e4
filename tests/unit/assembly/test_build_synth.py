"""``q38 build`` on the synthetic source bundles (``q38 synth --bundles``), end to end.

Invariants:
- goldens of config, pool and manifest for layered, folded and folded+libs+cuda builds;
- every emitted package opens with ``q38.package.open_package`` and every graph of the cpu
  variant creates an onnxruntime CPU session;
- the CLI takes the dynamic ``--lib-NAME PATH`` family and refuses bad flags with one line, exit 2;
- the synthetic bundles are byte-identical afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnxruntime as ort
import pytest
from support.build_bundles import tree_digest

from q38.cli import main
from q38.package import open_package

VARIANTS = {
    "folded": [],
    "layered": ["--layout", "layered"],
    "folded_libs_cuda": [
        "--lib-qsa", "{b}/libs/qsa/libcustom_ops.so", "--provider", "cuda",
        "--cuda-option", "gpu_mem_limit=25769803776", "--cuda-option=enable_cuda_graph=1",
    ],
}


@pytest.fixture(scope="module")
def _synth_module(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A fixed, unnumbered directory: the manifest records source paths relative to the
    # package's parent, so the goldens must not depend on session-fixture numbering.
    from q38.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("q38_build_synth", numbered=False) / "b", preset="tiny", variant="cpu", bundles=True)


@pytest.fixture
def synth(_synth_module: Path):
    before = tree_digest(_synth_module)
    yield _synth_module
    assert tree_digest(_synth_module) == before


def _cli(b: Path, out: Path, extra: list[str]) -> int:
    args = ["build", os.fspath(out), "--target", f"{b}/target", "--head", f"{b}/head", "--prefill", f"{b}/prefill"]
    return main(args + [a.format(b=b) for a in extra])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_synthetic_bundles_build_open_and_load(synth, tmp_path, variant, package_snapshot):
    out = tmp_path / variant
    assert _cli(synth, out, VARIANTS[variant]) == 0
    pkg = open_package(out)
    assert pkg.layout == ("layered" if variant == "layered" else "flat")
    for role in ("target", "head", "prefill"):
        ort.InferenceSession(os.fspath(pkg.graph_path(role)), providers=["CPUExecutionProvider"])
    assert package_snapshot == out


def test_lib_flag_family_and_one_line_errors(synth, tmp_path, capsys):
    out = tmp_path / "pkg"
    libs = ["--lib-qsa", f"{synth}/libs/qsa/libcustom_ops.so", f"--lib-hc={synth}/libs/hc/libcustom_ops.so"]
    assert _cli(synth, out, libs) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "basename 'libcustom_ops.so' is also used by --lib-qsa" in err
    assert not out.exists()
    with pytest.raises(SystemExit) as info:
        _cli(synth, out, ["--lib-qsa"])
    assert info.value.code == 2
    assert "expected one argument" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli(synth, out, ["--bogus"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
