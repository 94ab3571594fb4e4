"""nox sessions for q38: `nox -s demo` (the main job) and `nox -s cpu` (the CPU suite)."""

from __future__ import annotations

import os

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "cpu"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
PROJECT = nox.project.load_toml("pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PROJECT, "test")
LINT_DEPS = nox.project.dependency_groups(PROJECT, "lint")
ORT_DEFAULT = "onnxruntime==1.32.0"


def _install(session: nox.Session, *extra: str, ort: str = ORT_DEFAULT) -> None:
    session.install(*TEST_DEPS, ort, *extra)
    session.install("-e", ".", "--no-deps")
    session.install("-e", ".")


def _print_env(session: nox.Session) -> None:
    session.run(
        "python",
        "-c",
        "import onnxruntime as o, onnx, onnx_ir, numpy, sys; "
        "print('python', sys.version.split()[0], '| onnxruntime', o.__version__, o.get_available_providers(), "
        "'| onnx', onnx.__version__, '| onnx-ir', onnx_ir.__version__, '| numpy', numpy.__version__)",
        silent=False,
    )


def _pytest(session: nox.Session, *paths: str, workers: str = "auto") -> None:
    args = [*paths, "-n", workers, "--dist", "loadgroup", "-p", "no:cacheprovider"]
    session.run("pytest", *args, *session.posargs)


@nox.session(python=PYTHON)
def cpu(session: nox.Session) -> None:
    """The CPU suite: unit, contracts, differential and goldens check (pytest-xdist)."""
    _install(session)
    _print_env(session)
    _pytest(session, "tests/unit")


@nox.session(python=PYTHON, default=False)
@nox.parametrize("ort", ["1.32.0", "1.31.1"])
def contracts(session: nox.Session, ort: str) -> None:
    """The contract and differential tests against one onnxruntime version."""
    _install(session, ort=f"onnxruntime=={ort}")
    _print_env(session)
    _pytest(session, "tests/unit/contracts")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """ruff and mypy on q38/ and contracts/."""
    session.install(*LINT_DEPS, "numpy>=1.26", "onnx>=1.23.2", "onnx-ir>=1.1.0")
    session.run("ruff", "check", "q38", "contracts", "noxfile.py")
    session.run("mypy", "q38", "contracts")


@nox.session(python=PYTHON, default=False)
def goldens(session: nox.Session) -> None:
    """Update the goldens deliberately; the diff is what a reviewer reads."""
    _install(session)
    session.run("pytest", "tests/unit", "-n", "auto", "--snapshot-update", *session.posargs)


@nox.session(python=PYTHON, default=False)
def demo(session: nox.Session) -> None:
    """The main job end to end on the embedded synthetic default."""
    session.install(ORT_DEFAULT)
    session.install("-e", ".")
    out = session.create_tmp()
    session.run("q38", "demo", "--workdir", os.path.join(out, "demo"), *session.posargs)
