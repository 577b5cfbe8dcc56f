# SPDX-License-Identifier: Apache-2.0
"""python/dlfeed/_dlfeed.pyi is what scripts/gen_stubs.py writes from the built module."""
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHECKED_IN = ROOT / "python" / "dlfeed" / "_dlfeed.pyi"
COMMAND = "PYTHONPATH=python:build/python .venv/bin/python scripts/gen_stubs.py"


def test_checked_in_stubs_match_the_built_module(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_stubs", ROOT / "scripts" / "gen_stubs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    out = tmp_path / "_dlfeed.pyi"
    gen.main(["gen_stubs.py", str(out)])
    fresh, checked_in = out.read_text(), CHECKED_IN.read_text()
    if fresh != checked_in:
        import difflib

        diff = "".join(difflib.unified_diff(checked_in.splitlines(True), fresh.splitlines(True),
                                            "python/dlfeed/_dlfeed.pyi (checked in)", "generated", n=1))
        raise AssertionError(f"python/dlfeed/_dlfeed.pyi is stale; regenerate it with\n    {COMMAND}\n{diff[:4000]}")
    compile(fresh, str(out), "exec")  # valid Python syntax
