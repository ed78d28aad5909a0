"""Regenerates the committed kubelet bindings from the protos in :data:`PROTOS`.

    python -m hami_kubelet_api.generate          # rewrite the committed files
    python -m hami_kubelet_api.generate --check  # exit 1 when they are stale

The protos are compiled with the package source root as include path, so a proto file is known as
``hami_kubelet_api/v1beta1/api.proto`` and grpc's generated import already reads
``from hami_kubelet_api.v1beta1 import api_pb2``; no import rewriting is needed. The gRPC
service names stay the kubelet's (``v1beta1.DevicePlugin``, ``pluginregistration.Registration``,
``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``) because they come from the proto ``package``, not
from the file path.

The only post-processing: the typed stubs get a header that exempts them from ruff (lint and
format), since the workspace excludes only some generated file names from ruff.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

PROTOS = (
    "hami_kubelet_api/v1beta1/api.proto",
    "hami_kubelet_api/podresources/v1/api.proto",
    "hami_kubelet_api/pluginregistration/v1/api.proto",
    "hami_kubelet_api/dra/v1/api.proto",
    "hami_kubelet_api/dra/v1beta1/api.proto",
)
"""Each proto, relative to the source root; its bindings are written beside it."""
GENERATED_NAMES = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")
GENERATED_FILES = tuple(
    f"{proto.split('/', 1)[1].rsplit('/', 1)[0]}/{name}"
    for proto in PROTOS
    for name in GENERATED_NAMES
)
"""The generated files, relative to :func:`package_dir` (``v1beta1/api_pb2.py``, ...)."""
STUB_HEADER = b"# ruff: noqa\n# fmt: off\n"


class GenerationError(RuntimeError):
    """protoc or one of its plugins failed, or a plugin is not installed."""


def source_root() -> Path:
    """The ``src`` directory that holds the ``hami_kubelet_api`` package."""
    return Path(__file__).resolve().parents[1]


def package_dir() -> Path:
    """The ``hami_kubelet_api`` package: the protos and the committed generated files below it."""
    return Path(__file__).resolve().parent


def _plugin(name: str) -> str:
    # Prefer the plugin installed next to this interpreter, so a virtualenv run without
    # activation still finds the one pinned in the lock file.
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        raise GenerationError(f"{name} not found; install mypy-protobuf")
    return found


def generate() -> dict[str, bytes]:
    """Compile the protos in a temporary directory; ``{path below package_dir(): content}``."""
    with tempfile.TemporaryDirectory(prefix="hami-proto-") as tmp:
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={source_root()}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            *PROTOS,
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise GenerationError(f"protoc failed ({result.returncode}): {result.stderr.strip()}")
        out_dir = Path(tmp) / "hami_kubelet_api"
        files: dict[str, bytes] = {}
        for name in GENERATED_FILES:
            path = out_dir / name
            if not path.is_file():
                raise GenerationError(f"protoc did not produce {name}")
            content = path.read_bytes()
            files[name] = STUB_HEADER + content if name.endswith(".pyi") else content
        return files


def stale_files(generated: Mapping[str, bytes], directory: Path) -> list[str]:
    """Names whose committed copy in ``directory`` is missing or differs from ``generated``."""
    stale = []
    for name, content in generated.items():
        path = directory / name
        if not path.is_file() or path.read_bytes() != content:
            stale.append(name)
    return stale


def write_files(generated: Mapping[str, bytes], directory: Path) -> None:
    for name, content in generated.items():
        (directory / name).write_bytes(content)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hami_kubelet_api.generate")
    parser.add_argument(
        "--check", action="store_true", help="only report whether the committed files are current"
    )
    args = parser.parse_args(argv)
    generated = generate()
    directory = package_dir()
    stale = stale_files(generated, directory)
    if args.check:
        for name in stale:
            print(f"stale: {directory / name}", file=sys.stderr)
        return 1 if stale else 0
    write_files(generated, directory)
    for name in stale:
        print(f"wrote {directory / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
