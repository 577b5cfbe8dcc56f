#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the type stubs of dlfeed's compiled core, python/dlfeed/_dlfeed.pyi, from
the built module itself: the signatures pybind11 puts at the head of each
docstring, the docstrings, and the classes' properties (read-write ones become
attributes). tests/python/packaging/test_options_stubs.py fails when the checked-in file
differs from what this writes.

    PYTHONPATH=python:build/python .venv/bin/python scripts/gen_stubs.py [OUT]

OUT defaults to python/dlfeed/_dlfeed.pyi in this checkout.
"""
from __future__ import annotations

import pathlib
import re
import sys
from typing import Any, Dict, List

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "python" / "dlfeed" / "_dlfeed.pyi"
MODULE = "dlfeed._dlfeed"

# Set on each instance by the C++ error translator (bind_error.cpp), so not
# visible on the class.
INSTANCE_ATTRS: Dict[str, List[str]] = {"Error": ["code: str  # the absl status code name, e.g. 'NOT_FOUND'"]}

# pybind11 members every class has that are not the binding's.
SKIP = {"__module__", "__dict__", "__weakref__", "__doc__", "_pybind11_conduit_v1_"}


def _type(text: str) -> str:
    """A pybind11 type as a stub writes it: names in this module unqualified,
    and `object` (pybind11's word for "any Python object") as typing.Any."""
    text = text.replace(MODULE + ".", "")
    return re.sub(r"(?<![\w.])object(?![\w.])", "typing.Any", text)


def _signatures(func: Any) -> List[str]:
    """The signature lines pybind11 wrote into func's docstring (several when overloaded)."""
    doc = getattr(func, "__doc__", None) or ""
    name = func.__name__
    return [ln for ln in doc.splitlines() if re.match(rf"^(\d+\. )?{re.escape(name)}\(", ln)]


def _doc(obj: Any, skip_signatures: bool) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    if skip_signatures:
        lines = doc.splitlines()
        keep = [ln for ln in lines if not re.match(r"^(\d+\. )?\w+\(.*\) -> ", ln) and ln != "Overloaded function."]
        doc = "\n".join(keep)
    return doc.strip()


def _docstring(doc: str, indent: str) -> List[str]:
    if not doc:
        return []
    doc = doc.replace('"""', r"\"\"\"")
    if "\n" not in doc:
        return [f'{indent}"""{doc}"""']
    body = [f"{indent}{ln}" if ln else "" for ln in doc.splitlines()]
    return [f'{indent}"""{body[0].strip()}', *body[1:], f'{indent}"""']


def _split_args(args: str) -> List[str]:
    """Arguments at the top level of a signature (commas inside brackets stay)."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _args(args: str) -> str:
    # Defaults as `...` (a stub's convention; pybind11's repr of a default need not be Python).
    return ", ".join(re.sub(r"^([^=]*?) = .*$", r"\1 = ...", a) for a in _split_args(args))


def _def(sig: str, indent: str, method: bool) -> str:
    sig = re.sub(r"^\d+\. ", "", sig)
    m = re.match(r"^(\w+)\((.*)\) -> (.*)$", sig)
    if not m:
        raise ValueError(f"cannot parse pybind11 signature {sig!r}")
    name, args, ret = m.groups()
    if method:
        # "self: dlfeed._dlfeed.Batch" or "arg0: ..." first: the instance.
        args = re.sub(r"^[^,]*?(, |$)", "self\\1", args, count=1)
    return f"{indent}def {name}({_type(_args(args))}) -> {_type(ret)}: ..."


def _function(func: Any, indent: str, method: bool) -> List[str]:
    sigs = _signatures(func)
    doc = _doc(func, skip_signatures=True)
    out: List[str] = []
    for sig in sigs:
        if len(sigs) > 1:
            out.append(f"{indent}@typing.overload")
        line = _def(sig, indent, method)
        if doc and sig is sigs[-1]:
            out.append(line[: -len(" ...")])
            out.extend(_docstring(doc, indent + "    "))
        else:
            out.append(line)
    return out


def _property(name: str, prop: property, indent: str) -> List[str]:
    sig = (prop.fget.__doc__ or "").splitlines()[0]
    m = re.match(r"^\(.*\) -> (.*)$", sig)
    if not m:
        raise ValueError(f"cannot parse the getter signature of {name}: {sig!r}")
    ret = _type(m.group(1))
    doc = (prop.__doc__ or "").strip()
    if prop.fset is not None:
        return [f"{indent}{name}: {ret}", *_docstring(doc, indent)]
    return [f"{indent}@property", f"{indent}def {name}(self) -> {ret}:" + ("" if doc else " ..."),
            *_docstring(doc, indent + "    ")]


def _class(name: str, cls: type) -> List[str]:
    if issubclass(cls, BaseException):
        bases = ", ".join(b.__name__ for b in cls.__bases__)
        out = [f"class {name}({bases}):", *_docstring(_doc(cls, False), "    ")]
        out += [f"    {a}" for a in INSTANCE_ATTRS.get(name, [])]
        return out if len(out) > 1 else [out[0] + " ..."]
    out = [f"class {name}:", *_docstring(_doc(cls, False), "    ")]
    for attr, value in vars(cls).items():
        if attr in SKIP:
            continue
        if isinstance(value, property):
            out += _property(attr, value, "    ")
        elif _signatures(value):
            out += _function(value, "    ", method=True)
    return out


def generate() -> str:
    import importlib

    try:
        mod = importlib.import_module(MODULE)
    except ImportError:  # not on the path: this checkout's in-tree build
        sys.path[:0] = [str(ROOT / "python"), str(ROOT / "build" / "python")]
        mod = importlib.import_module(MODULE)
    body: List[str] = []
    for name, value in vars(mod).items():
        if name.startswith("__"):
            continue
        if isinstance(value, type):
            body += ["", *_class(name, value)]
        elif callable(value) and _signatures(value):
            body += ["", *_function(value, "", method=False)]
    text = "\n".join(body)
    imports = sorted({m for m in ("collections.abc", "numpy", "numpy.typing", "typing")
                      if re.search(rf"(?<![\w.]){re.escape(m)}\.", text)})
    head = [f'"""Type stubs of dlfeed\'s compiled core (bindings/python/*.cpp).',
            "",
            "Generated by scripts/gen_stubs.py from the built module: do not edit; run",
            "    PYTHONPATH=python:build/python .venv/bin/python scripts/gen_stubs.py",
            '"""',
            *[f"import {m}" for m in imports]]
    return "\n".join(head) + "\n" + text + "\n"


def main(argv: List[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else DEFAULT_OUT
    out.write_text(generate())
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
