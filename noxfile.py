"""nox sessions for q38: `nox -s demo` (the main job), `nox -s cpu` (the CPU suite) and `nox -s quick`."""

from __future__ import annotations

import os
import shutil
import subprocess

import nox

nox.needs_version = ">=2024.3.2"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "cpu"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"
PROJECT = nox.project.load_toml("pyproject.toml")
TEST_DEPS = nox.project.dependency_groups(PROJECT, "test")
LINT_DEPS = nox.project.dependency_groups(PROJECT, "lint")
MUTATION_DEPS = nox.project.dependency_groups(PROJECT, "mutation")
ORT_DEFAULT = "onnxruntime==1.32.0"
ORT_GPU_DEFAULT = "onnxruntime-gpu==1.31.1"


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


def _pytest(session: nox.Session, *args: str, workers: str = "auto") -> None:
    args = (*args, "-n", workers, "--dist", "loadgroup", "-p", "no:cacheprovider")
    session.run("pytest", *args, *session.posargs)


# The CPU suite's paths: the unit tests and a smoke of every benchmark (tests/bench: each runs once
# at its smallest size under --benchmark-disable, tests/bench/conftest.py). pyproject's testpaths.
CPU_SUITE = ("tests/unit", "tests/bench")


@nox.session(python=PYTHON)
def cpu(session: nox.Session) -> None:
    """The CPU suite: unit, contracts, differential and goldens check, and the benchmarks' smoke (pytest-xdist)."""
    _install(session)
    _print_env(session)
    _pytest(session, *CPU_SUITE)


@nox.session(python=PYTHON, default=False)
def quick(session: nox.Session) -> None:
    """The developer loop: the CPU suite without the tests marked ``slow`` (each over ~5 s)."""
    _install(session)
    _pytest(session, *CPU_SUITE, "-m", "not slow")


# The sharded suite (ci.yml): `nox -s cpu -- --splits N --group k --junitxml=junit-k.xml` runs one of N
# pytest-split groups, chosen from the stored .test_durations (repository root); the union job
# then fails if a collected test ran in no shard (tools/shard_union.py, `nox -s shard-union`).
DURATIONS_JUNIT = os.path.join(".benchmarks", "durations", "junit.xml")


@nox.session(python=PYTHON, default=False)
def durations(session: nox.Session) -> None:
    """Refresh .test_durations (pytest-split's input) from one full run of the CPU suite.

    Runs `nox -s cpu`'s suite with a JUnit report, checks that every collected test ran, and writes
    each test's time to .test_durations (commit it; posargs go to pytest).
    """
    _install(session)
    os.makedirs(os.path.dirname(DURATIONS_JUNIT), exist_ok=True)
    _pytest(session, *CPU_SUITE, f"--junitxml={DURATIONS_JUNIT}")
    session.run("python", "tools/shard_union.py", DURATIONS_JUNIT, "--durations-out", ".test_durations")


@nox.session(name="shard-union", python=PYTHON, default=False)
def shard_union(session: nox.Session) -> None:
    """Fail if a collected CPU-suite test ran in no shard (or in two): `-- JUNIT_DIR [--durations-out F]`."""
    if not session.posargs:
        session.error("usage: nox -s shard-union -- REPORT_OR_DIR... [--durations-out FILE] [-- PYTEST_ARGS]")
    _install(session)
    session.run("python", "tools/shard_union.py", *session.posargs)


@nox.session(python=PYTHON, default=False)
def check(session: nox.Session) -> None:
    """`q38 check` with the CPU runtime (package-check.yml): `nox -s check -- PKG [q38 check options]`."""
    if not session.posargs:
        session.error("usage: nox -s check -- PKG [--format sarif --output FILE ...]")
    session.install(ORT_DEFAULT)
    session.install("-e", ".")
    session.run("q38", "check", *session.posargs)


@nox.session(python=PYTHON, default=False)
@nox.parametrize("ort", ["1.32.0", "1.31.1"])
def contracts(session: nox.Session, ort: str) -> None:
    """The contract and differential tests, the CPU-kernel facts and the real fixtures against one onnxruntime version.

    The seeded differential generator runs Q38_CONTRACTS_FUZZ cases per class here (default 60;
    `nox -s cpu` runs 2) and writes its per-class agreement to .benchmarks/contracts-fuzz-<ort>.jsonl.
    """
    _install(session, ort=f"onnxruntime=={ort}")
    _print_env(session)
    report = os.path.join(".benchmarks", f"contracts-fuzz-{ort}.jsonl")
    os.makedirs(".benchmarks", exist_ok=True)
    if os.path.exists(report):
        os.unlink(report)
    session.env.setdefault("Q38_CONTRACTS_FUZZ", os.environ.get("Q38_CONTRACTS_FUZZ", "60"))
    session.env["Q38_CONTRACTS_FUZZ_REPORT"] = report
    _pytest(session, "tests/unit/contracts", "tests/unit/ortkernels", "tests/unit/realfixtures")


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    """The pre-commit hooks on every file: ruff, mypy --strict, lint-imports, actionlint (.pre-commit-config.yaml)."""
    session.install(*LINT_DEPS, "numpy>=1.26", "onnx>=1.23.2", "onnx-ir>=1.1.0")
    session.run("pre-commit", "run", "--all-files", "--show-diff-on-failure", *session.posargs)


@nox.session(python=PYTHON, default=False)
def properties(session: nox.Session) -> None:
    """The optimizer property tests with many random examples (Q38_OPT_PROPERTY_EXAMPLES, default 3000).

    The CPU suite runs them derandomized, 3 examples per case; this session explores (not
    derandomized) and prints hypothesis' event statistics: which guard declined what.
    """
    _install(session)
    examples = os.environ.get("Q38_OPT_PROPERTY_EXAMPLES", "3000")
    session.run("pytest", "tests/unit/properties", "-n", "auto", "-p", "no:cacheprovider",
                "--hypothesis-show-statistics", *session.posargs, env={"Q38_OPT_PROPERTY_EXAMPLES": examples})


@nox.session(python=PYTHON, default=False)
def mutation(session: nox.Session) -> None:
    """Mutation testing (mutmut) of the packages that guard data, with targeted tests per function.

    The packages are tests/mutation/mutate.py's TARGETS (q38/optimize, q38/offload, q38/assembly,
    q38/package, contracts) or those given. By default a fixed-seed uniform sample of 217 mutants per package (seed 0: a 95 % Wilson
    interval of at most +-4 points at any passing score, 90 % and up; judged in the sample's seeded
    order, so a partial run is a smaller uniform sample), each package's score with its interval, per module, the
    allowlisted equivalents with their reasons and every survivor with its diff. Resumable: a rerun
    over the same inputs keeps every verdict and judges only the rest; `--time-limit S` stops
    between chunks (exit 3, rerun to continue), `--fresh` starts over. `nox -s mutation --
    q38/assembly --time-limit 3000`; see tests/mutation/mutate.py for --all, --sample, --seed,
    --mutants GLOB, --keep, --no-run, --fail-under. Across machines: `-- PKG --shard k/N` judges the
    k-th of N disjoint parts of the sample, `-- --merge DIR...` scores the shards' result files.
    """
    _install(session, *MUTATION_DEPS)
    session.run("python", "tests/mutation/mutate.py", *session.posargs)


@nox.session(python=PYTHON, default=False)
def goldens(session: nox.Session) -> None:
    """Update the goldens deliberately (only the tests that use them); prints what changed."""
    _install(session)
    # --goldens-only skips (rather than deselects) every other test, so syrupy still deletes the
    # goldens of removed tests; posargs narrow the run (e.g. -k synth).
    session.run("pytest", "tests/unit", "--goldens-only", "--snapshot-update", "-n", "auto",
                "-p", "no:cacheprovider", "-q", "-r", "fE", *session.posargs)
    session.run("git", "diff", "--stat", "--", "goldens/", external=True)
    session.run("git", "status", "--short", "--untracked-files=all", "--", "goldens/", external=True)


@nox.session(python=PYTHON, default=False)
def demo(session: nox.Session) -> None:
    """The main job end to end on the embedded synthetic default."""
    session.install(ORT_DEFAULT)
    session.install("-e", ".[genai]")  # its last step generates with onnxruntime-genai
    # The workdir lives in nox's own scratch space; each run adds run-N there (q38 demo never
    # overwrites or deletes anything).
    workdir = os.path.join(session.create_tmp(), "demo")
    # The demo prints its next steps with a q38 command the user's shell can run: nox puts
    # .nox/demo/bin first on the PATH it gives q38, so q38 is told the caller's PATH.
    session.run("q38", "demo", "--workdir", workdir, *session.posargs,
                env={"Q38_USER_PATH": os.environ.get("PATH", "")})


# torch for `nox -s fixtures`: pip (not uv) takes the CPU wheel that lies on this kind of machine
# (pip's find-links); elsewhere PyPI's torch 2.13.0 is the CUDA build on Linux x86_64 (several GB)
# and a CPU build on macOS / aarch64. Q38_TORCH overrides the requirement (e.g. a local CPU wheel).
TORCH = "torch==2.13.0"
REAL_FIXTURES = "tests/fixtures/real"


@nox.session(python=PYTHON, default=False, venv_backend="venv")
def fixtures(session: nox.Session) -> None:
    """Regenerate the real fixtures with the real builder; fail if any byte differs.

    Installs the exporter stack (torch, transformers, onnxruntime-genai 0.18.0, onnx-ir; pinned in
    tests/fixtures/real/requirements.txt), rebuilds every fixture into a scratch directory and
    compares it file by file with the committed tree (listing the files that differ).
    """
    session.install(*os.environ.get("Q38_TORCH", TORCH).split())
    session.install("-r", f"{REAL_FIXTURES}/requirements.txt")
    scratch = os.path.join(session.create_tmp(), "real-fixtures")
    shutil.rmtree(scratch, ignore_errors=True)
    script = f"{REAL_FIXTURES}/make_real_fixtures.py"
    session.run("python", script, "build", "--out", scratch, *session.posargs)
    session.run("python", script, "compare", REAL_FIXTURES, scratch)


def _visible_gpu() -> str | None:
    """The first GPU `nvidia-smi -L` lists, or None (no driver, no device, no nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("GPU ")]
    return lines[0] if proc.returncode == 0 and lines else None


def _install_ort(session: nox.Session, ort: str) -> None:
    """Test deps with one onnxruntime: onnxruntime and onnxruntime-gpu are the same package."""
    session.install(*(d for d in TEST_DEPS if not d.startswith("onnxruntime")))
    session.install(ort)
    session.install("-e", ".")


# One environment per runtime: onnxruntime and onnxruntime-gpu install the same `onnxruntime/`
# package, so one over the other in one venv leaves both distributions' files mixed (every probe of
# the CPU dry run died after a real GPU run had filled `.nox/gpu`). `nox -s gpu` therefore only
# decides and hands over to `gpu-run(<runtime>)`, whose venv holds that one distribution, ever.
GPU_RUNTIMES = {"cuda": "onnxruntime-gpu", "cpu": "onnxruntime"}


def _runtime_of(requirement: str) -> str | None:
    """The onnxruntime distribution a requirement or wheel path installs (normalized), or None."""
    name = os.path.basename(requirement)
    if name.endswith(".whl"):
        name = name.split("-", 1)[0]
    else:
        for stop in "=<>!~;[ @":
            name = name.split(stop, 1)[0]
    name = name.strip().lower().replace("_", "-").replace(".", "-")
    return name if name in GPU_RUNTIMES.values() else None


def _gpu_requirement(posargs: list[str], wheel_env: str | None) -> tuple[str, str, list[str]]:
    """(runtime id, onnxruntime requirement, pytest args) of a `nox -s gpu` call.

    The requirement: a leading .whl / onnxruntime* posarg, else Q38_ORT_WHEEL, else onnxruntime-gpu
    1.31.1 -- or, with `--dry-run-cpu` and nothing named, the CPU build (onnxruntime-gpu cannot list
    its kernels without CUDA libraries). The runtime id (a key of GPU_RUNTIMES, "" for a requirement
    of neither distribution) picks the venv, `gpu-run(cuda)` or `gpu-run(cpu)`.
    """
    named = bool(posargs) and (posargs[0].endswith(".whl") or posargs[0].startswith("onnxruntime"))
    ort, rest = (posargs[0], posargs[1:]) if named else (wheel_env or ORT_GPU_DEFAULT, posargs)
    if "--dry-run-cpu" in posargs and ort == ORT_GPU_DEFAULT and not wheel_env:
        ort = ORT_DEFAULT
    runtime = _runtime_of(ort)
    return next((k for k, v in GPU_RUNTIMES.items() if v == runtime), ""), ort, rest


@nox.session(python=False, default=False)
def gpu(session: nox.Session) -> None:
    """CUDA parity and throughput (tests/gpu); skips itself when no GPU is visible.

    A skip is not a pass: with a GPU visible, a skip tests/gpu/manifest.json does not allow for
    the onnxruntime version and GPU class fails the session (`--allow-skip RULE` accepts one), and
    so does a probe or run error. `nox -s gpu -- --dry-run-cpu` runs the suite's logic on the CPU
    EP (CPU onnxruntime, tiny profile) on any machine. Figures: .benchmarks/gpu/figures.json + .png.
    The run itself is `gpu-run(cuda)` (onnxruntime-gpu) or `gpu-run(cpu)` (onnxruntime): one venv
    per runtime, so the real run and the dry run alternate in one checkout in either order.
    """
    posargs = list(session.posargs)
    device = _visible_gpu()
    if device is None and "--dry-run-cpu" not in posargs:
        session.skip("no NVIDIA GPU visible (nvidia-smi missing, failing or listing no device)")
    ident, ort, _ = _gpu_requirement(posargs, os.environ.get("Q38_ORT_WHEEL"))
    if not ident:
        session.error(f"{ort}: not onnxruntime-gpu or onnxruntime (a wheel's name says which distribution it is)")
    session.log(f"device: {device or 'none (--dry-run-cpu)'}; onnxruntime requirement: {ort}; venv of gpu-run({ident})")
    session.notify(f"gpu-run({ident})", posargs)


@nox.session(name="gpu-run", python=PYTHON, default=False)
@nox.parametrize("runtime", list(GPU_RUNTIMES), ids=list(GPU_RUNTIMES))
def gpu_run(session: nox.Session, runtime: str) -> None:
    """The GPU suite in the venv of one onnxruntime distribution (`nox -s gpu` picks it; see there)."""
    posargs = list(session.posargs)
    dry_run = "--dry-run-cpu" in posargs
    ident, ort, pytest_args = _gpu_requirement(posargs, os.environ.get("Q38_ORT_WHEEL"))
    if ident != runtime:
        session.error(f"{ort} installs {_runtime_of(ort) or 'no onnxruntime'}; this venv is gpu-run({runtime}), "
                      f"{GPU_RUNTIMES[runtime]} only: run `nox -s gpu` (it picks the venv)")
    _install_ort(session, ort)
    if not dry_run:  # builder-form packages generate end to end with the CUDA GenAI client
        session.install("onnxruntime-genai-cuda==0.18.0")  # the GenAI release the package format targets
    session.run(
        "python",
        "-c",
        "import onnxruntime as o, shutil, subprocess; "
        "print('onnxruntime', o.__version__, 'providers', o.get_available_providers()); "
        "shutil.which('nvidia-smi') and print(subprocess.run(['nvidia-smi', "
        "'--query-gpu=name,driver_version,compute_cap,memory.total', "
        "'--format=csv,noheader'], capture_output=True, text=True).stdout.strip())",
        silent=False,
    )
    out = os.path.join(".benchmarks", "gpu")
    os.makedirs(out, exist_ok=True)
    session.run(
        "pytest", "tests/gpu", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs", "--benchmark-enable",
        f"--benchmark-json={os.path.join(out, 'gpu.json')}", f"--figures={os.path.join(out, 'figures.json')}",
        *pytest_args, env={"Q38_GPU_OUT": out},
    )


@nox.session(name="gpu-wheelhouse", python=False, default=False)
def gpu_wheelhouse(session: nox.Session) -> None:
    """Download every wheel the GPU run needs into DIR as parts <= 40 MiB with a sha256 manifest.

    `nox -s gpu-wheelhouse -- DIR [--python 3.12] [--platform manylinux_2_28_x86_64] [--cuda-libs]`
    (networked machine; default cp312 manylinux x86_64, onnxruntime-gpu 1.31.1). Carry DIR/parts and
    DIR/manifest.json to the runner and run tests/gpu/run-offline.sh DIR there (docs/gpu.md).
    """
    if not session.posargs:
        session.error("usage: nox -s gpu-wheelhouse -- DIR [wheelhouse.py download options]")
    session.run("python3", "tests/gpu/wheelhouse.py", "download", *session.posargs, external=True)


@nox.session(python=PYTHON, default=False)
def bench(session: nox.Session) -> None:
    """Release gate: base ref and head interleaved here; a regression is a 95% interval above +15%."""
    # Q38_BENCH_ORT names the runtime (e.g. onnxruntime-gpu==1.31.1 or a wheel, for tests/gpu).
    _install_ort(session, os.environ.get("Q38_BENCH_ORT") or ORT_DEFAULT)
    session.install("matplotlib")  # the gate's plot (% change, interval, threshold); the gate needs none
    _print_env(session)
    args = list(session.posargs)
    gate_args, pytest_args = (args[: args.index("--")], args[args.index("--") + 1 :]) if "--" in args else (args, [])
    if not pytest_args:  # every benchmark but the scale one (below)
        pytest_args = ["tests/bench", "--ignore=tests/bench/test_scale_bench.py"]
    # The gate compares base and head on the small placement sizes; the large ones run once below.
    # Whole-process benchmarks next to the pytest (call) benchmarks: what a user waits for.
    # check-tiny (issue 27): what a tiny `q38 check` costs, mostly imports; import-onnx is its floor.
    tiny = os.path.abspath(os.path.join(".benchmarks", "startup-tiny"))
    shutil.rmtree(tiny, ignore_errors=True)
    session.run("python", "-m", "q38", "synth", tiny, "--preset", "tiny", "--json", silent=True)
    check_tiny, import_onnx = f"{{python}} -m q38 check {tiny}", "{python} -c 'import onnx'"
    processes = ["--process", "synth-full={python} -m q38 synth {tmp}/pkg --preset full",
                 "--process", "cli-startup={python} -m q38 --help",
                 "--process", f"check-tiny={check_tiny}", "--process", f"import-onnx={import_onnx}"]
    session.run("python", "-m", "q38.benchgate", "run", "--out", os.path.join(".benchmarks", "gate"),
                *processes, *gate_args, "--", *pytest_args,
                env={"Q38_BENCH_SIZES": os.environ.get("Q38_BENCH_SIZES", "tiny,full")})
    # The head against the floor: a tiny check within 1.5x of `import onnx` (CPU, fastest of 7 each).
    session.run("python", "-m", "q38.benchgate.floor", "--name", "check-tiny", "--command", check_tiny,
                "--floor-name", "import-onnx", "--floor", import_onnx, "--max-ratio", "1.5")
    # Placement on large packages (issue 14): build link / copy, offload's copy and check next to
    # cp -rl / cp -r / cp -r --reflink=auto in the same run, and memory 1 GB vs 8 GB. Needs ~35 GB
    # of disk for 8 GB; Q38_PLACEMENT_SIZES=0 skips it.
    sizes = os.environ.get("Q38_PLACEMENT_SIZES", "large0,large1,large8")
    if sizes != "0":
        session.run("pytest", "tests/bench/test_build_bench.py", "-p", "no:xdist", "-p", "no:cacheprovider", "-s",
                    "--benchmark-enable", "--benchmark-json", os.path.join(".benchmarks", "placement.json"),
                    env={"Q38_BENCH_SIZES": sizes})
    # The scale benchmark (issue 8) is a memory check on the head, not a base/head comparison:
    # large synthetic packages of Q38_SCALE_GB (default 1 and 8 GB) through build, optimize,
    # offload and check, peak RSS per step. Needs ~20 GB of disk; Q38_SCALE_GB=0 skips it.
    # Two GPU figures files (tests/gpu --figures; run-offline.sh writes one): per-tier TPS / TTFT change
    # with a bootstrap interval, kernel counts and parity verdicts side by side.
    figures = os.environ.get("Q38_GPU_FIGURES", "").split(",")
    if len(figures) == 2 and all(figures):
        session.run("python", "tests/gpu/q38gpu_figures.py", *figures)
    if os.environ.get("Q38_SCALE_GB", "1,8") != "0":
        session.run("pytest", "tests/bench/test_scale_bench.py", "-p", "no:xdist", "-p", "no:cacheprovider", "-s",
                    "--benchmark-enable", "--benchmark-json", os.path.join(".benchmarks", "scale.json"))


@nox.session(python=PYTHON, default=False)
@nox.parametrize("ort", ["1.32.0", "1.31.1"])
def external(session: nox.Session, ort: str) -> None:
    """The external differential: q38's verdict against real sessions on graphs nobody here wrote (issue 40).

    onnx's node tests (the onnx 1.20.0 wheel, fetched once with pip download into the q38 cache,
    read as a zip) and graphs rebuilt from onnxruntime's op tests (tests/corpus/ort_op_graphs.py),
    for one onnxruntime version: agreement per corpus and class, every refused-but-loads graph
    (fails the session) and every passed-but-refused one with ORT's text, as a table and as
    .benchmarks/external-<ort>.json; with both versions' JSON present the two are tabled together.
    """
    _install(session, ort=f"onnxruntime=={ort}")
    _print_env(session)
    os.makedirs(".benchmarks", exist_ok=True)
    report = os.path.join(".benchmarks", f"external-{ort}.json")
    session.run("python", "tools/external_differential.py", "--json", report, *session.posargs)
    both = [os.path.join(".benchmarks", f"external-{v}.json") for v in ("1.32.0", "1.31.1")]
    if all(os.path.exists(p) for p in both):
        session.run("python", "tools/external_differential.py", "--merge", *both)
