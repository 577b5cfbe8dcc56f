#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes docs/options.md, the reference of every loader option, from the one
table that defines them: dlfeed._options.KEYWORDS (the keyword, the C++ field it
sets, the `dlfeed run` flag) with each field's default and description as the
C++ binding gives them (bindings/python/bind_options.cpp). The flags' defaults
are the fields' (tests/python/cli/test_cli_help.py checks it);
tests/python/packaging/test_options_doc.py fails when the checked-in page differs
from what this writes.

    PYTHONPATH=python:build/python .venv/bin/python scripts/gen_options_doc.py [OUT]

OUT defaults to docs/options.md in this checkout.
"""
from __future__ import annotations

import pathlib
import sys
from typing import Any, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "docs" / "options.md"

HEAD = """\
# Loader options

Every option of the loader, as `dlfeed.Loader` (and `dlfeed.torch.Dataset`,
`dlfeed.tf.dataset`) takes it as a keyword, the C++ field of
`dlfeed::LoaderOptions` it sets, and the `dlfeed run` flag that sets the same
field. A flag's default is the field's, in the flag's units (`-mb`: MiB).
Defaults follow the machine and the data where they say so (0 or `auto`).
How the options work together: docs/python.md (Python), docs/io.md (reading),
docs/shuffle.md (orders), docs/formats.md (formats).

This page is generated from the table in `python/dlfeed/_options.py` and the
C++ binding's descriptions.

**Adding an option** takes, by hand: the field in its C++ struct (with its
default), one line in `bindings/python/bind_options.cpp` (its description,
shown here), one row in `python/dlfeed/_options.py` (keyword, field path,
`dlfeed run` flag or why none, and `type=` unless the field's default is a
bool, int or str), and for a flag its line in `tools/dlfeed/loader_flags.cc`
(defaulting to the field's default). This page, the keywords' TypedDicts
(`python/dlfeed/_kwargs.py`) and the module's stubs are then written from
those; tests fail while any of them is stale, or while a bound field has no
keyword, or a flag's default differs from its field's:

<!-- doc-test: skip: rewrites the repository's files (tests check them) -->
```sh
export PYTHONPATH=python:build/python
.venv/bin/python scripts/gen_stubs.py
.venv/bin/python scripts/gen_kwargs.py
.venv/bin/python scripts/gen_options_doc.py
```

"""

# Headings of the table's parts, by the first field of each part.
SECTIONS = [
    ("fields", "Dataset and batches"),
    ("order.strategy", "Order (`OrderSpec`)"),
    ("format.format", "Format (`FormatOptions`)"),
    ("io.kind", "Reading (`IoOptions`, `AdvancedOptions`)"),
    ("resident", "Memory and threads"),
    ("trace.enabled", "Trace (`counters::TraceOptions`)"),
    ("stage.dir", "Staging (`staging::StageOptions`)"),
    ("object_cache.dir", "Object stores (`ObjectCacheOptions`)"),
    (None, "Not `LoaderOptions` fields"),
]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# Fields counted in bytes (their defaults are also shown in KiB, MiB, GiB).
BYTE_FIELDS = ("bytes", "gap", "max_read", "_above", "piece", "budget", "limit")


def _default(field: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"`{value}`"
    if isinstance(value, int):
        if value == (1 << 64) - 1:
            return "no limit"
        if not any(word in field for word in BYTE_FIELDS):
            return f"`{value}`"
        for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
            if value >= 1 << shift and value % (1 << shift) == 0:
                return f"`{value}` ({value >> shift} {unit})"
        return f"`{value}`"
    if value is None or value in ("", [], {}):
        return "none"
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def generate() -> str:
    from dlfeed import _options

    out: List[str] = [HEAD]
    starts = {field: title for field, title in SECTIONS}
    rows = [(kw, k) for kw, k in _options.KEYWORDS.items() if k.field is not None]
    rows += [(kw, k) for kw, k in _options.KEYWORDS.items() if k.field is None]
    header = "| keyword | C++ field | `dlfeed run` flag | default | what it does |\n| --- | --- | --- | --- | --- |"
    opened = False
    for keyword, k in rows:
        title = starts.pop(k.field, None)
        if title is not None:
            out.append(f"{'' if not opened else chr(10)}## {title}\n\n{header}")
            opened = True
        field = f"`{k.field}`" if k.field else "(none)"
        flag = f"`--{k.flag}`" if k.flag else _cell(k.python_only or "")
        if k.flag and k.flag_default:
            flag += f" (default {_cell(k.flag_default)})"
        default = _default(k.field, _options.field_default(k.field)) if k.field else "-"
        what = " ".join(filter(None, [k.note or (_options.field_doc(k.field) if k.field else ""), k.also]))
        out.append(f"| `{keyword}` | {field} | {flag} | {default} | {_cell(what)} |")
    assert not [t for f, t in starts.items() if f is not None], f"sections without rows: {starts}"
    out.append("\nFields no keyword sets, and why:\n")
    for field, why in _options.NOT_KEYWORDS.items():
        out.append(f"- `{field}`: {why}.")
    return "\n".join(out) + "\n"


def main(argv: List[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.write_text(generate())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
