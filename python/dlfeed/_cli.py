# SPDX-License-Identifier: Apache-2.0
"""The `dlfeed` console script of the wheel: runs the C++ command line.

pip installs the compiled command inside the package (dlfeed/bin/dlfeed, with
dlfeed/share/dlfeed/dlfeed_report.py beside it, and its libraries in
dlfeed.libs/ after auditwheel repair), where its RUNPATH finds them wherever
site-packages is; this script is what pip puts on PATH. It replaces itself
with the command (exec), so flags, output, signals and the exit status are
the command's own.
"""
import os
import pathlib
import sys
import sysconfig

import dlfeed


def binary():
    """The compiled command in this installed package, or None."""
    # The package's folders; then site-packages' dlfeed/, where an editable
    # install (pip install -e .) puts the compiled parts while __path__ is the source.
    places = [pathlib.Path(d) for d in dlfeed.__path__]
    places.append(pathlib.Path(sysconfig.get_path("platlib")) / "dlfeed")
    for d in places:
        exe = d / "bin" / "dlfeed"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    return None


def main() -> None:
    exe = binary()
    if exe is None:
        sys.exit("dlfeed: the command line is not part of this installation of the dlfeed package "
                 "(an in-tree build has it at build/tools/dlfeed; a wheel built by pip has it in dlfeed/bin)")
    # `dlfeed report` draws with matplotlib in this Python (the venv's) unless told otherwise.
    os.environ.setdefault("DLFEED_PYTHON", sys.executable)
    os.execv(exe, ["dlfeed", *sys.argv[1:]])


if __name__ == "__main__":
    main()
