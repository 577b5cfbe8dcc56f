# SPDX-License-Identifier: Apache-2.0
"""docs/options.md is what scripts/gen_options_doc.py writes from the options'
table (dlfeed._options.KEYWORDS) and the C++ binding's descriptions."""
import difflib
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHECKED_IN = ROOT / "docs" / "options.md"
COMMAND = "PYTHONPATH=python:build/python .venv/bin/python scripts/gen_options_doc.py"


def test_checked_in_options_page_matches_the_table(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_options_doc", ROOT / "scripts" / "gen_options_doc.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    fresh, checked_in = gen.generate(), CHECKED_IN.read_text()
    if fresh != checked_in:
        diff = "".join(difflib.unified_diff(checked_in.splitlines(True), fresh.splitlines(True),
                                            "docs/options.md (checked in)", "generated", n=1))
        raise AssertionError(f"docs/options.md is stale; regenerate it with\n    {COMMAND}\n{diff[:4000]}")


def test_every_keyword_has_a_row():
    from dlfeed import _options
    page = CHECKED_IN.read_text()
    missing = [kw for kw in _options.KEYWORDS if f"| `{kw}` |" not in page]
    assert not missing, missing
