# SPDX-License-Identifier: Apache-2.0
"""An installed prefix works on its own: `cmake --install` into a temporary
prefix, then every command runs from there with the source and build trees
hidden (a private mount namespace puts an empty tmpfs over them; the
Python environment with matplotlib, which is the user's and not the tree's,
is mounted back for `dlfeed report`)."""
import os
import pathlib
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def build_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("DLFEED_BIN", ROOT / "build" / "tools" / "dlfeed")).resolve().parents[1]


def can_hide_trees() -> str:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare(1) to hide the trees in a mount namespace"
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True)
    return "" if probe.returncode == 0 else f"unshare --mount refused: {probe.stderr.decode()[-200:]}"


def test_every_command_runs_from_an_installed_prefix_with_the_trees_hidden(tmp_path):
    why = can_hide_trees()
    if why:
        pytest.skip(why)
    build = build_dir()
    prefix = tmp_path / "prefix"
    subprocess.run(["cmake", "--install", str(build), "--prefix", str(prefix)], check=True, capture_output=True)
    dlfeed = prefix / "bin" / "dlfeed"
    assert dlfeed.exists()
    assert (prefix / "share" / "dlfeed" / "dlfeed_report.py").exists()
    ldd = subprocess.run(["ldd", str(dlfeed)], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd, ldd
    for tree in {ROOT, build}:
        assert str(tree) not in ldd, f"the installed dlfeed loads a library from {tree}:\n{ldd}"

    venv = pathlib.Path(sys.prefix)
    work = tmp_path / "work"
    work.mkdir()
    d = work / "d"
    steps = [
        "dlfeed --help",
        "dlfeed workloads",
        f"dlfeed generate --format hdf5 --files 2 --samples-per-file 16 --shape 8,8 --dir {d}",
        f"dlfeed inspect {d}",
        f"dlfeed order --files 2 --samples-per-file 16 --strategy global_shuffle --epoch 1",
        f"dlfeed run {d} --fields records --batch-size 4 --epochs 2 --compute-ms 1"
        f" --summary-json {work}/s.json --trace {work}/t.json",
        f"dlfeed calibrate {d} --fields records --max-mb 1 --max-seconds 1 --out {work}/cal.json",
        f"dlfeed report --out-dir {work}/pics {work}/s.json {work}/t.json",
    ]
    trees = [t for t in {ROOT, build} if not any(o != t and o in t.parents for o in (ROOT, build))]
    hide = [f"mount -t tmpfs none {shlex.quote(str(t))}" for t in trees]
    # The user's Python environment (matplotlib for report) comes back where it was.
    keep = ""
    if str(venv).startswith(str(ROOT)) or str(venv).startswith(str(build)):
        saved = tmp_path / "venv"
        saved.mkdir()
        keep = (f"mount --bind {shlex.quote(str(venv))} {saved} && ")
        restore = f"mkdir -p {shlex.quote(str(venv))} && mount --bind {saved} {shlex.quote(str(venv))} && "
    else:
        restore = ""
    script = (keep + " && ".join(hide) + " && " + restore + f"test ! -e {shlex.quote(str(ROOT / 'CMakeLists.txt'))} && "
              + " && ".join(f"echo '$ {s}' && {s}" for s in steps))
    env = dict(os.environ, PATH=f"{prefix / 'bin'}:/usr/bin:/bin", DLFEED_PYTHON=sys.executable)
    for k in ("DLFEED_BIN", "DLFEED_REPORT_SCRIPT", "PYTHONPATH"):
        env.pop(k, None)
    proc = subprocess.run(["unshare", "--mount", "bash", "-c", "set -e; " + script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for s in steps:
        assert f"$ {s}" in proc.stdout, f"did not run: {s}"
    assert "breakdown.png" in proc.stdout
    assert (work / "pics" / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    assert (work / "cal.json").exists()
