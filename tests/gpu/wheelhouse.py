#!/usr/bin/env python3
"""The GPU run's wheels for an offline runner: download, split into parts, reassemble, verify.

Standard library only (it runs on the runner's bare interpreter, 3.11-3.13)::

    python tests/gpu/wheelhouse.py download DIR [--python 3.12] [--platform manylinux_2_28_x86_64]
                                                [--ort onnxruntime-gpu==1.31.1] [--cuda-libs]
                                                [--part-mib 40] [--only-missing INSTALLED.txt] [REQ ...]
    python tests/gpu/wheelhouse.py assemble DIR OUT    # verify every part and wheel, write OUT/*.whl
    python tests/gpu/wheelhouse.py unpack WHEELS TARGET  # install without pip (run-offline.sh's fallback)

``download`` (networked machine) runs ``pip download --only-binary=:all:`` for the target Python and
platform into DIR/wheels, then splits every file into DIR/parts/<wheel>.partNNN of at most
``--part-mib`` (default 40) MiB -- a runner that takes files in bounded pieces needs room for the
repository (about 15 MB) beside each -- and writes DIR/manifest.json (sha256 and size of every
wheel and every part). ``--only-missing FILE`` (the image's ``pip list --format=freeze``, or one
distribution name a line) downloads only what the image lacks, without dependencies: against a
typical CUDA image (tests/gpu/image-packages.txt) that is onnxruntime-gpu, onnxruntime-genai-cuda,
onnx, onnx-ir and syrupy. ``assemble`` checks the manifest's sha256 of each part, concatenates, checks each
wheel's sha256 and writes the wheels to OUT; any mismatch or missing part is one error line and
exit 2. Carry DIR/parts and DIR/manifest.json (not DIR/wheels) to the runner: docs/gpu.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

FORMAT = "q38.gpu-wheelhouse/1"
MIB = 1 << 20
# What tests/gpu needs besides onnxruntime-gpu: q38's own dependencies (pyproject.toml) and the test
# dependencies it imports (tests/conftest.py loads syrupy and hypothesis; the figures plot matplotlib).
BASE_REQUIREMENTS = (
    "numpy>=1.26", "onnx>=1.23.2", "onnx-ir>=1.1.0", "ml_dtypes>=0.5",
    "pytest>=8.3", "pytest-benchmark>=5.1", "syrupy>=4.8", "hypothesis>=6.100", "matplotlib>=3.8",
)
GENAI_CUDA = "onnxruntime-genai-cuda==0.18.0"  # pinned: its CUDA 13 libraries are checked by the preflight
DEFAULT_PART_MIB = 40


def dist_name(requirement: str) -> str:
    """The normalized distribution name of a requirement or a ``pip freeze`` line (PEP 503)."""
    name = re.split(r"[\s<>=!~;\[@(]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def read_installed(path: Path) -> frozenset[str]:
    """Distribution names of an image's package list (``pip list --format=freeze`` / ``pip freeze``
    or one name a line; ``#`` comments and blank lines ignored)."""
    names = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(dist_name(line))
    return frozenset(names)


def trimmed(requirements: list[str], installed: frozenset[str]) -> list[str]:
    """The requirements whose distribution the image does not have."""
    return [r for r in requirements if dist_name(r) not in installed]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(8 * MIB), b""):
            h.update(block)
    return h.hexdigest()


def split(wheels: Path, parts: Path, part_bytes: int) -> dict[str, object]:
    """Split every file of ``wheels`` into ``parts``; the manifest document."""
    parts.mkdir(parents=True, exist_ok=True)
    files = []
    for wheel in sorted(p for p in wheels.iterdir() if p.is_file()):
        entry: dict[str, object] = {"name": wheel.name, "size": wheel.stat().st_size, "sha256": _sha256(wheel)}
        pieces = []
        with wheel.open("rb") as f:
            for k, block in enumerate(iter(lambda: f.read(part_bytes), b"")):
                part = parts / f"{wheel.name}.part{k:03d}"
                part.write_bytes(block)
                pieces.append({"name": part.name, "size": len(block), "sha256": hashlib.sha256(block).hexdigest()})
        entry["parts"] = pieces
        files.append(entry)
    return {"format": FORMAT, "part_limit_bytes": part_bytes, "files": files}


def assemble(root: Path, out: Path) -> list[Path]:
    """Verify and concatenate the parts under ``root`` into ``out``; ValueError naming what is wrong."""
    manifest = json.loads((root / "manifest.json").read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{root / 'manifest.json'}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    parts_dir = root / "parts"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for entry in manifest["files"]:
        target = out / Path(entry["name"]).name
        h = hashlib.sha256()
        with target.open("wb") as w:
            for piece in entry["parts"]:
                path = parts_dir / Path(piece["name"]).name
                if not path.is_file():
                    raise ValueError(f"missing part {path}")
                data = path.read_bytes()
                if len(data) > manifest["part_limit_bytes"]:
                    raise ValueError(f"{path}: {len(data)} bytes, above the part limit")
                if hashlib.sha256(data).hexdigest() != piece["sha256"]:
                    raise ValueError(f"{path}: sha256 mismatch (damaged in transfer?)")
                h.update(data)
                w.write(data)
        if h.hexdigest() != entry["sha256"] or target.stat().st_size != entry["size"]:
            raise ValueError(f"{target.name}: the reassembled wheel's sha256 differs from the manifest")
        written.append(target)
    return written


def _unpack_one(wheel: Path, target: Path) -> None:
    """Extract one wheel into ``target`` as pip --target lays it out (.data/purelib|platlib at the top)."""
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            member = info.filename
            parts = Path(member).parts
            if ".." in parts or member.startswith("/"):
                raise ValueError(f"{wheel.name}: unsafe member {member}")
            if member.endswith("/"):
                continue
            if len(parts) > 2 and parts[0].endswith(".data") and parts[1] in {"purelib", "platlib"}:
                dest = target.joinpath(*parts[2:])
            elif parts[0].endswith(".data"):
                continue  # scripts / headers: not needed to import
            else:
                dest = target / member
            dest.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, dest.open("wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            mode = (info.external_attr >> 16) & 0o777
            if mode:
                dest.chmod(mode)


def unpack(wheels: Path, target: Path) -> int:
    """Install without pip or an index: extract every wheel into ``target``, several at once.

    The wheelhouse is resolved and pinned when it is downloaded, so installing is extraction: the
    same files pip --target writes (no scripts or headers, which the suite never runs). Wheels
    are extracted in parallel (zlib releases the GIL); a file two wheels both hold (a namespace
    package's ``__init__.py``) has the same bytes in each.
    """
    target.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("*.whl"), key=lambda w: -w.stat().st_size)  # the largest first
    with concurrent.futures.ThreadPoolExecutor(min(8, max(1, os.cpu_count() or 1))) as pool:
        for done in [pool.submit(_unpack_one, wheel, target) for wheel in found]:
            done.result()
    return 0


def download(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    ort = args.ort + ("[cuda,cudnn]" if args.cuda_libs else "")
    reqs = [ort, *BASE_REQUIREMENTS, *([] if args.no_genai else [GENAI_CUDA]), *args.requirements]
    no_deps: list[str] = []
    if args.only_missing:
        try:
            installed = read_installed(Path(args.only_missing))
        except OSError as exc:
            print(f"wheelhouse: error: --only-missing {args.only_missing}: {exc}", file=sys.stderr)
            return 2
        reqs = trimmed(reqs, installed)
        no_deps = ["--no-deps"]  # the image has the dependencies; only what it lacks travels
        print(f"wheelhouse: the image has {len(installed)} distributions; downloading {', '.join(reqs) or 'nothing'}")
        if not reqs:
            return 0
    pyver = args.python.replace(".", "")
    platforms = [args.platform, "manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
                 "manylinux_2_28_x86_64"] if args.platform.endswith("x86_64") else [args.platform]
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", pyver,
           "--implementation", "cp", "--abi", f"cp{pyver}", "--abi", "abi3", "--abi", "none", "-d", str(wheels), *no_deps]
    for p in dict.fromkeys(platforms):
        cmd += ["--platform", p]
    cmd += ["--platform", "any"]
    print("+", " ".join(cmd + reqs), flush=True)
    proc = subprocess.run(cmd + reqs, check=False)
    if proc.returncode != 0:
        print(f"wheelhouse: error: pip download failed (exit {proc.returncode})", file=sys.stderr)
        return 2
    manifest = split(wheels, root / "parts", args.part_mib * MIB)
    manifest["python"] = args.python
    manifest["platform"] = args.platform
    manifest["requirements"] = reqs
    manifest["only_missing"] = bool(args.only_missing)
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    total = sum(int(f["size"]) for f in manifest["files"])  # type: ignore[index,union-attr]
    parts = sum(len(f["parts"]) for f in manifest["files"])  # type: ignore[arg-type,index,union-attr]
    print(f"wheelhouse: {len(manifest['files'])} wheels, {total / MIB:.0f} MiB in {parts} parts "  # type: ignore[arg-type]
          f"of <= {args.part_mib} MiB -> {root / 'parts'} + {root / 'manifest.json'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="wheelhouse.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("download", help="download the GPU run's wheels and split them into parts")
    d.add_argument("dir")
    d.add_argument("--python", default="3.12", help="target Python version (default 3.12)")
    d.add_argument("--platform", default="manylinux_2_28_x86_64", help="target platform tag")
    d.add_argument("--ort", default="onnxruntime-gpu==1.31.1", help="the onnxruntime requirement")
    d.add_argument("--cuda-libs", action="store_true",
                   help="also the nvidia-* CUDA / cuDNN wheels (onnxruntime-gpu[cuda,cudnn]; several GB)")
    d.add_argument("--no-genai", action="store_true", help=f"without {GENAI_CUDA}")
    d.add_argument("--part-mib", type=int, default=DEFAULT_PART_MIB,
                   help=f"largest part in MiB (default {DEFAULT_PART_MIB}: room for the repository beside it in 64 MiB)")
    d.add_argument("--only-missing", metavar="INSTALLED", default=None,
                   help="the image's package list (pip list --format=freeze); download only what it lacks, no deps")
    d.add_argument("requirements", nargs="*", help="extra requirements")
    a = sub.add_parser("assemble", help="verify the parts and reassemble the wheels")
    a.add_argument("dir")
    a.add_argument("out")
    u = sub.add_parser("unpack", help="install the wheels of a folder without pip (extract into TARGET)")
    u.add_argument("wheels")
    u.add_argument("target")
    args = parser.parse_args(argv)
    if args.cmd == "download" and args.part_mib <= 0:
        parser.error(f"--part-mib {args.part_mib}: must be positive")
    if args.cmd == "download":
        return download(args)
    if args.cmd == "unpack":
        try:
            return unpack(Path(args.wheels), Path(args.target))
        except (OSError, ValueError) as exc:
            print(f"wheelhouse: error: {exc}", file=sys.stderr)
            return 2
    try:
        wheels = assemble(Path(args.dir), Path(args.out))
    except (OSError, ValueError, KeyError) as exc:
        print(f"wheelhouse: error: {exc}", file=sys.stderr)
        return 2
    print(f"wheelhouse: {len(wheels)} wheels verified -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
