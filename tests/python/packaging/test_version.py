# SPDX-License-Identifier: Apache-2.0
"""One version source: the file VERSION. CMake reads it (project(VERSION)),
pyproject.toml reads it (scikit-build-core's regex provider), the C++ headers
carry it (include/dlfeed/detail/export.h, checked by CMake at configure), and
the Python package reports it (from the compiled module). A release that bumps
one place and forgets another fails here."""
import pathlib
import re
import subprocess
import sys

import dlfeed
from conftest import ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = None


def version_file() -> str:
    v = (ROOT / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", v), f"VERSION holds {v!r}, not MAJOR.MINOR.PATCH"
    return v


def test_cmake_reads_version_file():
    text = (ROOT / "CMakeLists.txt").read_text()
    assert re.search(r"file\(STRINGS \$\{CMAKE_CURRENT_SOURCE_DIR\}/VERSION _dlfeed_version", text)
    assert "project(dlfeed VERSION ${_dlfeed_version}" in text
    assert not re.search(r"project\(dlfeed VERSION \d", text), "CMakeLists.txt writes the version out again"


def test_pyproject_takes_its_version_from_the_file():
    text = (ROOT / "pyproject.toml").read_text()
    assert not re.search(r'^version\s*=', text, re.M), "pyproject.toml writes the version out again"
    if tomllib is None:
        return
    meta = tomllib.loads(text)
    assert "version" in meta["project"]["dynamic"]
    provider = meta["tool"]["scikit-build"]["metadata"]["version"]
    assert provider["provider"] == "scikit_build_core.metadata.regex"
    assert provider["input"] == "VERSION"
    m = re.search(provider["regex"], (ROOT / provider["input"]).read_text(), re.M)
    assert m and m.group("value") == version_file()


def test_export_header_matches():
    v = version_file()
    major, minor, patch = v.split(".")
    header = (ROOT / "include" / "dlfeed" / "detail" / "export.h").read_text()
    macros = dict(re.findall(r"^#define (DLFEED_\w+) (.+)$", header, re.M))
    assert macros["DLFEED_VERSION_MAJOR"] == major
    assert macros["DLFEED_VERSION_MINOR"] == minor
    assert macros["DLFEED_VERSION_PATCH"] == patch
    assert macros["DLFEED_VERSION_STRING"] == f'"{v}"'
    assert macros["DLFEED_ABI"] == f"v{major}_{minor}"


def test_python_package_reports_it():
    assert dlfeed.__version__ == version_file()
    assert dlfeed._dlfeed.__version__ == version_file()


def test_the_built_tree_agrees(tmp_path):
    # The configured build (CMakeCache) says the same, and the soname carries
    # major.minor while the version is 0.x.
    v = version_file()
    import os
    import pathlib

    build = pathlib.Path(os.environ.get("DLFEED_BIN", ROOT / "build" / "tools" / "dlfeed")).resolve().parents[1]
    cache = (build / "CMakeCache.txt").read_text()
    assert f"CMAKE_PROJECT_VERSION:STATIC={v}" in cache
    libs = sorted(build.glob("libdlfeed.so.*"))
    if libs:  # a shared build
        major, minor, _ = v.split(".")
        so = f"libdlfeed.so.{major}.{minor}" if major == "0" else f"libdlfeed.so.{major}"
        readelf = subprocess.run(["readelf", "-d", str(libs[0])], capture_output=True, text=True, check=True).stdout
        assert f"[{so}]" in readelf, readelf


def test_every_source_file_names_its_licence():
    """scripts/spdx.py --check: each C++, Python, shell and CMake file dlfeed owns
    carries `SPDX-License-Identifier: Apache-2.0` (the LICENSE file's) in its first lines."""
    root = ROOT
    r = subprocess.run([sys.executable, str(root / "scripts" / "spdx.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Apache License" in (root / "LICENSE").read_text()[:200]
