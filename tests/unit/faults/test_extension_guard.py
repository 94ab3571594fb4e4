"""q38.extension_guard: a C extension's init runs with the handled signals held off, an interrupt
deferred during it is raised once it returns, and the guard leaves no trace on what it loaded.

Each case runs in a fresh interpreter: an extension module is initialized once per process, and
these import numpy's C core (an extension in every environment q38 installs into) under the guard.
The end-to-end cases (real signals against ``python -m q38``) are in test_sigint.py.
"""

from __future__ import annotations

import json
import subprocess
import sys

PRELUDE = """
import importlib.machinery, json, signal, sys
from q38 import extension_guard as g

seen = {}


class Probe(importlib.machinery.ExtensionFileLoader):
    # Runs as the first step of numpy's C core init: what the init itself would see.
    def create_module(self, spec):
        seen["initializing"] = g.initializing()
        seen["sigint_blocked"] = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        seen["sigterm_blocked"] = signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, [])
        if DEFER:
            g.defer_interrupt()
        return super().create_module(spec)


class ProbeFinder:
    def find_spec(self, name, path=None, target=None):
        if name != "numpy._core._multiarray_umath" or seen:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = Probe(spec.loader.name, spec.loader.path)
        return spec


sys.meta_path.insert(0, ProbeFinder())
"""


def _run(body: str, *, defer: bool = False) -> dict[str, object]:
    code = f"DEFER = {defer}\n{PRELUDE}\n{body}\nprint(json.dumps(seen))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_an_extension_init_runs_with_the_guarded_signals_blocked_and_leaves_no_trace() -> None:
    seen = _run("""
with g.guarded_extension_imports([signal.SIGINT]):
    import numpy
seen["guard_left"] = any(isinstance(f, g.ExtensionGuard) for f in sys.meta_path)
core = sys.modules["numpy._core._multiarray_umath"]
seen["loader"] = type(core.__loader__).__name__
seen["spec_loader"] = type(core.__spec__.loader).__name__
seen["sigint_blocked_after"] = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
seen["initializing_after"] = g.initializing()
seen["pure_python_loader"] = type(sys.modules["numpy._core"].__loader__).__name__
""")
    assert seen == {
        "initializing": True, "sigint_blocked": True, "sigterm_blocked": False,  # only the signals asked for
        "guard_left": False, "loader": "Probe", "spec_loader": "Probe",  # the finder's own loader, not the guard's
        "sigint_blocked_after": False, "initializing_after": False, "pure_python_loader": "SourceFileLoader",
    }  # fmt: skip


def test_without_the_guard_an_init_is_not_marked_and_blocks_nothing() -> None:
    """The probe itself can tell: the same import outside the guard sees neither."""
    seen = _run("import numpy")
    assert seen == {"initializing": False, "sigint_blocked": False, "sigterm_blocked": False}


def test_an_interrupt_deferred_during_an_init_is_raised_once_the_init_returns_and_the_module_is_kept() -> None:
    seen = _run("""
try:
    with g.guarded_extension_imports([signal.SIGINT]):
        import numpy
except KeyboardInterrupt:
    seen["raised"] = "KeyboardInterrupt"
seen["imported"] = "numpy._core._multiarray_umath" in sys.modules
seen["kept"] = [m.__name__ for m in g._KEPT]
seen["initializing_after"] = g.initializing()
with g.guarded_extension_imports([signal.SIGINT]):  # a later run starts with nothing deferred
    import numpy.linalg
seen["later_import"] = "numpy.linalg" in sys.modules
""", defer=True)
    assert seen == {
        "initializing": True, "sigint_blocked": True, "sigterm_blocked": False, "raised": "KeyboardInterrupt",
        "imported": False,  # the interrupt failed the import ...
        "kept": ["numpy._core._multiarray_umath"],  # ... yet the module it created is never freed
        "initializing_after": False, "later_import": True,
    }  # fmt: skip


def test_a_run_inside_a_run_keeps_one_guard_and_still_imports() -> None:
    """q38 demo runs each step through the CLI inside its own run: the inner block adds no second
    guard (two guards asked each other for specs until RecursionError, failing every demo step)."""
    seen = _run("""
with g.guarded_extension_imports([signal.SIGINT]):
    with g.guarded_extension_imports([signal.SIGINT]):
        import numpy
        import json.decoder, email.parser  # pure-Python imports pass through the guard too
        seen["guards_inside"] = sum(isinstance(f, g.ExtensionGuard) for f in sys.meta_path)
    seen["guards_after_inner"] = sum(isinstance(f, g.ExtensionGuard) for f in sys.meta_path)
seen["guards_after"] = sum(isinstance(f, g.ExtensionGuard) for f in sys.meta_path)
""")
    assert seen == {"initializing": True, "sigint_blocked": True, "sigterm_blocked": False,
                    "guards_inside": 1, "guards_after_inner": 1, "guards_after": 0}  # fmt: skip


def test_a_second_guard_put_on_the_path_by_hand_does_not_recurse() -> None:
    """Two guards on sys.meta_path (whoever put them there) each skip every guard when asking for a spec."""
    seen = _run("""
sys.meta_path.insert(0, g.ExtensionGuard([signal.SIGINT]))
sys.meta_path.insert(0, g.ExtensionGuard([signal.SIGINT]))
import numpy
import email.parser
seen["imported"] = "email.parser" in sys.modules
""")
    assert seen["initializing"] is True and seen["imported"] is True
