"""tests/gpu/wheelhouse.py without a network: parts, manifest, verified reassembly, pip-less install.

Invariants guarded: every part is at most the limit and the parts of a wheel concatenate to its
bytes; assemble reproduces every wheel byte for byte; a damaged or missing part is one
``wheelhouse: error:`` line and exit 2; ``unpack`` installs a wheel's modules (and its .data/purelib)
so they import from the target.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np

GPU_DIR = Path(__file__).resolve().parents[2] / "gpu"
sys.path.insert(0, str(GPU_DIR))
import wheelhouse  # noqa: E402


def _wheel(path: Path, module: str, payload: bytes) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr(f"{module}/__init__.py", f"VALUE = {len(payload)}\n")
        z.writestr(f"{module}/blob.bin", payload)
        z.writestr(f"{module}-1.0.data/purelib/{module}_extra.py", "EXTRA = 1\n")
        z.writestr(f"{module}-1.0.dist-info/METADATA", f"Name: {module}\nVersion: 1.0\n")
    return path


def _house(tmp_path: Path) -> tuple[Path, list[Path]]:
    wheels = tmp_path / "house" / "wheels"
    wheels.mkdir(parents=True)
    rng = np.random.default_rng(0)
    made = [_wheel(wheels / "big-1.0-py3-none-any.whl", "big", rng.bytes(2_500_000)),
            _wheel(wheels / "small-1.0-py3-none-any.whl", "small", b"x" * 10)]
    manifest = wheelhouse.split(wheels, tmp_path / "house" / "parts", 1 << 20)
    (tmp_path / "house" / "manifest.json").write_text(json.dumps(manifest))
    return tmp_path / "house", made


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(GPU_DIR / "wheelhouse.py"), *map(str, args)], capture_output=True,
                          text=True, check=False)


def test_parts_reassemble_byte_for_byte(tmp_path: Path) -> None:
    house, made = _house(tmp_path)
    parts = sorted((house / "parts").iterdir())
    assert len(parts) == 4 and all(p.stat().st_size <= 1 << 20 for p in parts)
    proc = _cli("assemble", house, tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    for wheel in made:
        assert (tmp_path / "out" / wheel.name).read_bytes() == wheel.read_bytes()


def test_a_damaged_or_missing_part_is_one_line(tmp_path: Path) -> None:
    house, _made = _house(tmp_path)
    part = house / "parts" / "big-1.0-py3-none-any.whl.part001"
    data = bytearray(part.read_bytes())
    data[100] ^= 1
    part.write_bytes(bytes(data))
    proc = _cli("assemble", house, tmp_path / "out")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"wheelhouse: error: {part}: sha256 mismatch (damaged in transfer?)"
    part.unlink()
    proc = _cli("assemble", house, tmp_path / "out2")
    assert (proc.returncode, proc.stderr.strip()) == (2, f"wheelhouse: error: missing part {part}")


def test_unpack_installs_importable_modules(tmp_path: Path) -> None:
    house, made = _house(tmp_path)
    target = tmp_path / "site"
    assert _cli("unpack", house / "wheels", target).returncode == 0
    proc = subprocess.run([sys.executable, "-c", "import big, small, big_extra; print(big.VALUE, small.VALUE)"],
                          capture_output=True, text=True, check=False, env={"PYTHONPATH": str(target)})
    assert proc.stdout.split() == ["2500000", "10"], proc.stderr
    assert (target / "big" / "blob.bin").read_bytes() == zipfile.ZipFile(made[0]).read("big/blob.bin")


def test_run_offline_refuses_an_interpreter_the_wheels_were_not_built_for(tmp_path: Path) -> None:
    """Wheels of one Python (the manifest's ``python``) need that interpreter: one line, exit 2."""
    house, _made = _house(tmp_path)
    doc = json.loads((house / "manifest.json").read_text())
    doc["python"] = "2.7"
    (house / "manifest.json").write_text(json.dumps(doc))
    script = GPU_DIR / "run-offline.sh"
    for env in ({}, {"Q38_PYTHON": sys.executable}):
        proc = subprocess.run(["bash", str(script), str(house)], capture_output=True, text=True, timeout=120,
                              env={"PATH": "/usr/bin:/bin", **env}, check=False)  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "Python 2.7" in lines[0], proc.stderr
    assert not (house / "run" / "site").exists()  # refused before installing anything


def _fake_pip(tmp_path: Path, sizes: dict[str, int]) -> tuple[dict[str, str], Path]:
    """A ``pip`` module that records its argv and writes wheels of ``sizes`` into ``-d DIR``."""
    fake = tmp_path / "fakepip" / "pip"
    fake.mkdir(parents=True)
    record = tmp_path / "pip-argv.json"
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(
        "import json, os, sys\n"
        f"json.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n"
        "d = sys.argv[sys.argv.index('-d') + 1]\n"
        f"for name, size in {sizes!r}.items():\n"
        "    with open(os.path.join(d, name), 'wb') as f:\n"
        "        f.write(os.urandom(size))\n")
    return {"PYTHONPATH": str(fake.parent)}, record


def test_download_splits_into_parts_of_at_most_part_mib(tmp_path: Path) -> None:
    env, _record = _fake_pip(tmp_path, {"onnxruntime_gpu-1.31.1-cp312-none-any.whl": 100 * (1 << 20) + 7,
                                        "onnx-1.19.0-cp312-none-any.whl": 3 << 20})
    proc = subprocess.run([sys.executable, str(GPU_DIR / "wheelhouse.py"), "download", str(tmp_path / "house"),
                           "--part-mib", "40"], capture_output=True, text=True, check=False,
                          env={**env, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    parts = sorted((tmp_path / "house" / "parts").iterdir())
    assert max(p.stat().st_size for p in parts) <= 40 << 20
    assert [p.stat().st_size for p in parts if "onnxruntime_gpu" in p.name] == [40 << 20, 40 << 20, (20 << 20) + 7]
    manifest = json.loads((tmp_path / "house" / "manifest.json").read_text())
    assert manifest["part_limit_bytes"] == 40 << 20
    assert _cli("assemble", tmp_path / "house", tmp_path / "out").returncode == 0
    assert wheelhouse.DEFAULT_PART_MIB == 40  # the default leaves room for a 15 MB tree within 64 MiB


def test_only_missing_downloads_what_the_stated_image_lacks(tmp_path: Path) -> None:
    env, record = _fake_pip(tmp_path, {"syrupy-4.9.1-py3-none-any.whl": 1000})
    proc = subprocess.run([sys.executable, str(GPU_DIR / "wheelhouse.py"), "download", str(tmp_path / "house"),
                           "--only-missing", str(GPU_DIR / "image-packages.txt")], capture_output=True, text=True,
                          check=False, env={**env, "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    argv = json.loads(record.read_text())
    assert "--no-deps" in argv
    wanted = [a for a in argv if wheelhouse.dist_name(a) in {
        "onnxruntime-gpu", "onnxruntime-genai-cuda", "onnx", "onnx-ir", "syrupy", "numpy", "pytest", "matplotlib",
        "hypothesis", "pytest-benchmark", "ml-dtypes"}]
    assert [wheelhouse.dist_name(a) for a in wanted] == ["onnxruntime-gpu", "onnx", "onnx-ir", "syrupy",
                                                         "onnxruntime-genai-cuda"]
    assert "onnxruntime-genai-cuda==0.18.0" in argv  # pinned
    assert json.loads((tmp_path / "house" / "manifest.json").read_text())["only_missing"] is True
    assert wheelhouse.trimmed(["numpy>=1.26", "onnx>=1.23.2"], frozenset({"numpy"})) == ["onnx>=1.23.2"]
    assert wheelhouse.dist_name("ONNX_IR[extra]>=1") == "onnx-ir"
