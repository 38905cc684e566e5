"""Regenerate the Python stubs of protos/ into clients/, or check they are current.

`make protos` writes them; `make drift` (part of `make test`) fails when the
committed stubs differ from what the pinned grpcio-tools generates, so a hand
edit or a forgotten regeneration never lands.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
OUT_ROOT = ROOT / "clients"
GENERATED_ROOT = OUT_ROOT / "remotelog" / "api"
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def generate(out: Path) -> None:
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
        *protos,
    ]
    # protoc resolves imports relative to -I; run from the proto root so the
    # generated files never embed a path of this machine.
    cwd = os.getcwd()
    os.chdir(PROTO_ROOT)
    try:
        if protoc.main(args) != 0:
            sys.exit("protoc failed")
    finally:
        os.chdir(cwd)


def generated_files(root: Path) -> dict[str, Path]:
    return {
        str(p.relative_to(root)): p
        for p in root.rglob("*")
        if p.is_file() and p.name.endswith(SUFFIXES)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="fail if the committed stubs are stale"
    )
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        fresh_root = Path(tmp)
        generate(fresh_root)
        fresh = generated_files(fresh_root / "remotelog" / "api")
        current = generated_files(GENERATED_ROOT) if GENERATED_ROOT.exists() else {}
        if opts.check:
            stale = sorted(
                name
                for name in fresh.keys() | current.keys()
                if name not in fresh
                or name not in current
                or not filecmp.cmp(fresh[name], current[name], shallow=False)
            )
            if stale:
                print("generated stubs are stale; run `make protos`:", *stale, sep="\n  ")
                return 1
            print(f"generated stubs are current ({len(fresh)} files)")
            return 0
        for name, path in current.items():
            if name not in fresh:
                path.unlink()
        for name, path in fresh.items():
            target = GENERATED_ROOT / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        print(f"wrote {len(fresh)} files under {GENERATED_ROOT.relative_to(ROOT)}")
        return 0


if __name__ == "__main__":
    sys.exit(main())
