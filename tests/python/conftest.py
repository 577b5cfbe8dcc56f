# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures of every folder below (api, adaptors, cli, packaging, s3): run the built
`dlfeed` command line against real files; the learnable datasets (py_datasets.py); a real
S3 server and a fault-injecting proxy (s3_harness.py).
Helpers the folders share are modules here (py_datasets.py, workload_files.py): this
folder is on sys.path, as conftest.py's."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from py_datasets import FORMATS, write_dataset
from s3_harness import s3_proxy, s3_server  # noqa: F401  (the S3 fixtures of s3/: a real server, a proxy)

ROOT = pathlib.Path(__file__).resolve().parents[2]
# `dlfeed report` draws with $DLFEED_PYTHON (else python3 on PATH): this one, which has matplotlib.
os.environ.setdefault("DLFEED_PYTHON", sys.executable)


def pytest_collection_modifyitems(items):
    """The wheel's tests run last: scripts/test.sh builds the wheel in the background meanwhile
    (test_wheel.py's own build then finds it done)."""
    items.sort(key=lambda item: item.path.name == "test_wheel.py")


def dlfeed_binary() -> str:
    path = os.environ.get("DLFEED_BIN", str(ROOT / "build" / "tools" / "dlfeed"))
    if not os.path.exists(path):
        pytest.fail(f"dlfeed binary not found at {path}; build first (scripts/test.sh does)")
    return path


class Dlfeed:
    """Runs `dlfeed` subcommands and parses what they print."""

    def __init__(self, binary: str):
        self.binary = binary

    def run(self, *args, check=True) -> subprocess.CompletedProcess:
        proc = subprocess.run([self.binary, *map(str, args)], capture_output=True, text=True, timeout=300)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"dlfeed {' '.join(map(str, args))} exited {proc.returncode}\n"
                f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
        return proc

    def inspect(self, path, *args) -> dict:
        """`dlfeed inspect --json PATH`: files, sources and every sample's extents."""
        return json.loads(self.run("inspect", "--json", *args, path).stdout)

    def dump_sample(self, path, k, tmp_path, *args) -> bytes:
        """The decoded bytes of sample k, as `dlfeed inspect --dump-sample` writes them."""
        out = pathlib.Path(tmp_path) / f"sample_{k}.bin"
        self.run("inspect", "--dump-sample", k, "--out", out, *args, path)
        return out.read_bytes()

    def error(self, *args) -> str:
        """Runs a command expected to fail; returns its stderr."""
        proc = self.run(*args, check=False)
        assert proc.returncode != 0, f"expected failure, got success:\n{proc.stdout}"
        assert "Traceback" not in proc.stderr and "Sanitizer" not in proc.stderr, proc.stderr
        assert proc.returncode < 128, f"crashed with signal {proc.returncode - 128}: {proc.stderr}"
        return proc.stderr


@pytest.fixture(scope="session")
def dlfeed() -> Dlfeed:
    return Dlfeed(dlfeed_binary())


@pytest.fixture(scope="session")
def learnable(tmp_path_factory):
    """{format: (dir, x, y)}: 4 files x 64 samples each (py_datasets.write_dataset)."""
    base = tmp_path_factory.mktemp("learnable")
    return {fmt: write_dataset(fmt, base / fmt) for fmt in FORMATS}
