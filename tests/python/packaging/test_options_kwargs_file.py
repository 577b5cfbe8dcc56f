# SPDX-License-Identifier: Apache-2.0
"""python/dlfeed/_kwargs.py (the keywords' TypedDicts) is what
scripts/gen_kwargs.py writes from the options' table (dlfeed._options.KEYWORDS):
a keyword added to the table, or a type changed there, fails here until the
file is regenerated."""
import difflib
import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHECKED_IN = ROOT / "python" / "dlfeed" / "_kwargs.py"
COMMAND = "PYTHONPATH=python:build/python .venv/bin/python scripts/gen_kwargs.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_kwargs", ROOT / "scripts" / "gen_kwargs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


def test_checked_in_kwargs_file_matches_the_table():
    fresh, checked_in = _generator().generate(), CHECKED_IN.read_text()
    if fresh != checked_in:
        diff = "".join(difflib.unified_diff(checked_in.splitlines(True), fresh.splitlines(True),
                                            "python/dlfeed/_kwargs.py (checked in)", "generated", n=1))
        raise AssertionError(f"python/dlfeed/_kwargs.py is stale; regenerate it with\n    {COMMAND}\n{diff[:4000]}")


def test_a_type_comes_from_the_row_or_the_fields_default(monkeypatch):
    from dlfeed import _options
    gen = _generator()
    assert gen.keyword_type("seed", _options.KEYWORDS["seed"]) == "int"  # OrderSpec.seed's default
    assert gen.keyword_type("verify_crc", _options.KEYWORDS["verify_crc"]) == "bool"
    assert gen.keyword_type("resident", _options.KEYWORDS["resident"]) == "Mode"  # the row's own
    # A new keyword whose type the table does not say and its field's default cannot: the generator says so.
    monkeypatch.setitem(_options.KEYWORDS, "new_knob", _options.Keyword("order.params.indices"))
    try:
        gen.generate()
    except SystemExit as e:
        assert "new_knob" in str(e) and "type=" in str(e)
    else:
        raise AssertionError("a keyword with no type and a field default of no plain type was generated")
