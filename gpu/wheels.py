"""Prepares the wheels the GPU check carries to a GPU machine that has no network: the packages
of this project's dependency tree that the machine's python3 lacks (what it holds is listed in
gpu/image_packages.txt), at .venv's exact versions, and this project's own wheel. A package
the machine holds is not carried, nor anything only it needs: the machine brings its own (torch,
numpy, tensorboard, ... at its versions; installed with --no-deps, nothing replaces them).

    .venv/bin/python gpu/wheels.py [--dest .whl]    download, build, check the size
    .venv/bin/python gpu/wheels.py --list           what would be carried, and its size
    .venv/bin/python gpu/wheels.py --image-pins     what the tree takes from the image, at
                                                          .venv's versions (the rehearsal's image)

The folder is kept under LIMIT_BYTES (48 MiB: the checkout and its wheels travel as one small
bundle), or nothing is written and the command exits 2 saying what is too big.
"""

import argparse
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Dict, Iterable, List, Set, Tuple

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "mfsdp-launcher"
LIMIT_BYTES = 48 * 2**20
# megatron.training, which bench/megatron_lm_loop.py drives, imports these beyond megatron-core's
# own requirements (read in megatron/training of megatron-core 0.19.2)
ALSO_CARRIED: List[str] = []
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages() -> Set[str]:
    lines = (ROOT / "gpu" / "image_packages.txt").read_text().splitlines()
    return {normalize(l) for l in lines if l.strip() and not l.startswith("#")}


def requirements(name: str, extras: Iterable[str]) -> List[Requirement]:
    """The requirements of an installed distribution that apply here, with these extras."""
    wanted = []
    for text in metadata.requires(name) or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
            wanted.append(req)
    return wanted


def walk(image: Set[str]) -> Tuple[Dict[str, str], Dict[str, str]]:
    """({name: installed version} of what the image lacks, the same of what the tree reaches in
    the image), walking the tree from this project (its runtime requirements, not its test extra)
    and ALSO_CARRIED."""
    carried: Dict[str, str] = {}
    in_image: Dict[str, str] = {}
    queue = [(PROJECT, ())] + [(n, ()) for n in ALSO_CARRIED]
    while queue:
        name, extras = queue.pop()
        key = normalize(name)
        if key in image:
            in_image[key] = metadata.version(name)
            continue
        if key in carried and not extras:
            continue
        carried[key] = metadata.version(name)
        queue.extend((r.name, tuple(r.extras)) for r in requirements(name, extras))
    return carried, in_image


def carried(image: Set[str]) -> Dict[str, str]:
    """{distribution name: installed version} of what the image lacks."""
    return walk(image)[0]


def estimated_bytes(names: Iterable[str]) -> int:
    """What their wheels will weigh: each installed file deflated, as a wheel (a zip) holds it
    (level 1, a little larger than pip's level 6: an estimate on the safe side). The project is
    installed editable, so its own files are read from the checkout."""
    total = 0
    for name in names:
        if name == PROJECT:
            files = [p for d in ("launcher", "hydra_plugins") for p in (ROOT / d).rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts]
        else:
            files = [Path(f.locate()) for f in metadata.files(name) or []
                     if "__pycache__" not in f.parts]
        total += sum(len(zlib.compress(p.read_bytes(), 1)) for p in files if p.is_file())
    return total


def download(found: Dict[str, str], dest: Path) -> None:
    """Linux x86_64 CPython 3.12 wheels of exactly these versions; a package published only as
    source (antlr4-python3-runtime 4.9.3) is built into a wheel here, as is this project."""
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    pip = [sys.executable, "-m", "pip", "--quiet", "--no-color"]
    for name, version in sorted(found.items()):
        if name == PROJECT:
            subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(dest), str(ROOT)],
                           check=True, stdout=subprocess.DEVNULL)
            continue
        source = f"{name}=={version}"
        got = subprocess.run([*pip, "download", "--no-deps", "--only-binary=:all:",
                              "--python-version", "3.12", "--implementation", "cp", *platforms,
                              "--dest", str(dest), source], capture_output=True, text=True)
        if got.returncode != 0:
            subprocess.run([*pip, "wheel", "--no-deps", "--wheel-dir", str(dest), source],
                           check=True, stdout=subprocess.DEVNULL)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", default=str(ROOT / ".whl"))
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--image-pins", action="store_true")
    args = parser.parse_args(argv)
    found, in_image = walk(image_packages())
    if args.image_pins:  # and pytest, which the GPU tier runs with (the image has it)
        print(" ".join(f"{n}=={v}" for n, v in sorted(in_image.items())), "pytest")
        return 0
    for name, version in sorted(found.items()):
        print(f"{name}=={version}")
    if args.list:
        print(f"{len(found)} packages, about {estimated_bytes(found) / 2**20:.1f} MiB of wheels")
        return 0
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:
        download(found, Path(tmp))
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        if size > LIMIT_BYTES:
            biggest = max(Path(tmp).iterdir(), key=lambda p: p.stat().st_size)
            print(f"error: the wheels weigh {size / 2**20:.1f} MiB, over the {LIMIT_BYTES >> 20} "
                  f"MiB a device call can carry beside the checkout (largest: {biggest.name}); "
                  "carry less", file=sys.stderr)
            return 2
        shutil.rmtree(args.dest, ignore_errors=True)
        shutil.move(tmp, args.dest)
    print(f"{len(found)} wheels, {size / 2**20:.1f} MiB in {args.dest}: carry it to the GPU "
          "machine with the checkout (gpu/check.sh installs them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
