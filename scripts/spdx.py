#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Puts `SPDX-License-Identifier: Apache-2.0` at the head of every source file
dlfeed owns (C++, Python, shell, CMake), after a shebang; `--check` lists the
files without it and exits 1 (tests/python/packaging/test_version.py runs it).

    python3 scripts/spdx.py [--check]
"""
from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TAG = "SPDX-License-Identifier: Apache-2.0"
# The comment for each kind of file; None: not given the line (the stubs,
# python/dlfeed/_dlfeed.pyi, are written whole by scripts/gen_stubs.py).
COMMENT = {".cc": "//", ".h": "//", ".cpp": "//", ".py": "#", ".pyi": None, ".sh": "#", ".cmake": "#", ".txt": "#"}
# Fuzz inputs: data, not source.
SKIP_PARTS = {"regressions", "corpus"}


def owned_files() -> list[pathlib.Path]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = []
    for name in out.splitlines():
        p = ROOT / name
        if SKIP_PARTS & set(p.parts):
            continue
        if p.suffix == ".txt" and p.name != "CMakeLists.txt":
            continue
        if COMMENT.get(p.suffix) is None:
            continue
        files.append(p)
    return files


def main() -> int:
    check = "--check" in sys.argv[1:]
    missing = []
    for p in owned_files():
        text = p.read_text()
        head = text.split("\n", 3)[:3]
        if any(TAG in line for line in head):
            continue
        missing.append(p)
        if check:
            continue
        line = f"{COMMENT[p.suffix]} {TAG}\n"
        if text.startswith("#!"):
            first, _, rest = text.partition("\n")
            text = first + "\n" + line + rest
        else:
            text = line + text
        p.write_text(text)
    if check and missing:
        print("no SPDX line:", *(str(p.relative_to(ROOT)) for p in missing), sep="\n  ")
        return 1
    if not check:
        print(f"spdx: {len(missing)} files given the line")
    return 0


if __name__ == "__main__":
    sys.exit(main())
