# SPDX-License-Identifier: Apache-2.0
"""The docs' code runs: every block of README.md and docs/*.md marked to run
is run, in its document's order, on data this test makes, so the docs cannot
drift from the code.

Convention (the marker is an HTML comment, invisible when the Markdown is
rendered, on the line right before the block's opening fence):

    <!-- doc-test: run -->                run this block (```sh or ```python)
    <!-- doc-test: skip: REASON -->      do not run it, and say why (too long, needs MPI, a fragment ...)

In the documents named in MUST_MARK every ```sh and ```python block carries one
of the two, so a new block is a decision, not an accident. Other blocks
(```cpp, ```cmake, ```json) are not run (the C++ is built and run as
examples/train_loop from a shell block).

How a block runs: in a working directory of the document's own (blocks of one
document share it, so a later block sees what an earlier one wrote), which
starts with
  data/d      the README's dataset: DLIO-layout HDF5, 8 files of 32 samples of
              64x64 uint8 (train/img_*_of_8.hdf5: records_0, labels)
  data/train  NPZ files with members x (float32 8x8) and y (int64 labels)
  build/tools/dlfeed, build/examples/train_loop   links to the build's
Shell blocks run with bash -e and `dlfeed` (DLFEED_BIN) on PATH. Python
blocks run in a fresh interpreter (this test's, with its PYTHONPATH) after a
prelude that defines `step(batch)`, the docs' stand-in for a training step.
"""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MUST_MARK = {"README.md", "python.md", "counters.md"}
MARK = re.compile(r"^<!-- doc-test: (run|skip: (\S.*?)) -->$")
PRELUDE = "def step(batch):\n    pass  # the docs' stand-in for a training step\n\n"
TIMEOUT = 120


def blocks(path):
    """(line of the fence, language, marker: "run" / "skip" / None, skip reason, code) per fenced block."""
    lines = path.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        lang, start = fence.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        m = MARK.match(lines[i - 1].strip()) if i > 0 else None
        marker = None if not m else ("run" if m.group(1) == "run" else "skip")
        out.append((start + 1, lang, marker, m.group(2) if m and marker == "skip" else None,
                    "\n".join(lines[i + 1:j]) + "\n"))
        i = j + 1
    return out


def runnable():
    return [pytest.param(doc, line, lang, code, id=f"{doc.name}:{line}")
            for doc in DOCS for line, lang, marker, _, code in blocks(doc) if marker == "run"]


def test_markers_are_well_formed_and_every_block_decided():
    problems = []
    for doc in DOCS:
        text = doc.read_text().splitlines()
        fence_lines = {line for line, *_ in blocks(doc)}
        for k, line in enumerate(text, start=1):
            if "doc-test" in line:
                if not MARK.match(line.strip()):
                    problems.append(f"{doc.name}:{k}: malformed marker {line.strip()!r}")
                elif k + 1 not in fence_lines:
                    problems.append(f"{doc.name}:{k}: marker not right before a code block")
        for line, lang, marker, _, _ in blocks(doc):
            if marker == "run" and lang not in ("sh", "python"):
                problems.append(f"{doc.name}:{line}: only sh and python blocks run (this one is {lang or 'plain'})")
            if doc.name in MUST_MARK and lang in ("sh", "python") and marker is None:
                problems.append(f"{doc.name}:{line}: mark this {lang} block <!-- doc-test: run --> "
                                "or <!-- doc-test: skip: REASON -->")
    assert not problems, "\n".join(problems)
    assert len(runnable()) >= 6


@pytest.fixture(scope="session")
def template(dlfeed, tmp_path_factory):
    """The data every document's directory starts with."""
    t = tmp_path_factory.mktemp("docs_template")
    dlfeed.run("generate", "--format", "hdf5", "--layout", "dlio", "--dir", t / "data" / "d", "--files", 8,
               "--samples-per-file", 32, "--shape", "64,64")
    train = t / "data" / "train"
    train.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(4):
        np.savez(train / f"part_{i}.npz", x=rng.random((64, 8, 8), dtype=np.float32),
                 y=rng.integers(0, 10, 64).astype(np.int64))
    return t


_dirs = {}


@pytest.fixture
def workdir(request, template, dlfeed, tmp_path_factory):
    doc = request.node.callspec.params["doc"]
    if doc not in _dirs:
        d = tmp_path_factory.mktemp("doc_" + doc.stem)
        shutil.copytree(template, d, dirs_exist_ok=True)
        binary = Path(dlfeed.binary).resolve()
        (d / "build" / "tools").mkdir(parents=True)
        (d / "build" / "tools" / "dlfeed").symlink_to(binary)
        example = binary.parent.parent / "examples" / "train_loop"  # build/tools/dlfeed -> build/examples
        if example.exists():
            (d / "build" / "examples").mkdir()
            (d / "build" / "examples" / "train_loop").symlink_to(example)
        _dirs[doc] = d
    return _dirs[doc]


@pytest.mark.parametrize("doc,line,lang,code", runnable())
def test_doc_block_runs(doc, line, lang, code, workdir, dlfeed):
    where = f"{doc.relative_to(ROOT)}:{line}"
    if "build/examples/train_loop" in code and not (workdir / "build" / "examples" / "train_loop").exists():
        pytest.skip(f"{where}: build/examples/train_loop is not built (cmake --build build --target train_loop)")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env["PATH"] = f"{Path(dlfeed.binary).resolve().parent}{os.pathsep}{env.get('PATH', '')}"
    if lang == "sh":
        cmd = ["bash", "-e", "-o", "pipefail", "-c", code]
    else:
        script = workdir / f"block_{doc.stem}_{line}.py"
        script.write_text(PRELUDE + code)
        cmd = [sys.executable, str(script)]
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, (f"{where} failed (exit {proc.returncode}):\n{code}\n--- stdout\n{proc.stdout[-3000:]}"
                                  f"\n--- stderr\n{proc.stderr[-3000:]}")
