# SPDX-License-Identifier: Apache-2.0
"""The keywords' TypedDicts (python/dlfeed/_kwargs.py, written from
dlfeed._options.KEYWORDS by scripts/gen_kwargs.py), which type checkers and IDEs
read, cannot drift from the options the C++ binding accepts: their keys are the
table's keywords, which reach every bound LoaderOptions field; each type admits
its field's default; each literal value listed is one the binding takes."""
import inspect
import typing

import numpy as np
import pytest

import dlfeed
from dlfeed import _kwargs, _options
from test_options import leaf_fields

KEYWORDS = _options.KEYWORDS
HINTS = typing.get_type_hints(_kwargs.LoaderKwargs)


def admits(hint, value) -> bool:
    """Whether `value` is of type `hint` (the forms _kwargs.py uses)."""
    if hint is typing.Any:
        return True
    if hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        return any(admits(a, value) for a in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is int:  # bool is an int to isinstance, not to a checker reading a field's type
        return isinstance(value, int) and not isinstance(value, bool)
    try:
        return isinstance(value, origin or hint)
    except TypeError:  # a Protocol of numpy.typing.DTypeLike: not checkable at run time
        return False


def literals(hint):
    """The Literal values a hint lists (inside Optional/Union)."""
    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    if typing.get_origin(hint) is typing.Union:
        return [v for a in typing.get_args(hint) for v in literals(a)]
    return []


def test_typeddict_keys_are_the_keywords_and_reach_every_bound_field():
    assert set(_kwargs.LoaderKwargs.__annotations__) == set(KEYWORDS), (
        "python/dlfeed/_kwargs.py's LoaderKwargs and _options.KEYWORDS name different keywords: "
        f"only in LoaderKwargs {sorted(set(HINTS) - set(KEYWORDS))}, only in KEYWORDS "
        f"{sorted(set(KEYWORDS) - set(HINTS))}")
    assert _kwargs.LoaderKwargs.__required_keys__ == frozenset()  # every keyword may be left out
    reached = {KEYWORDS[k].field for k in HINTS if KEYWORDS[k].field is not None}
    assert reached | set(_options.NOT_KEYWORDS) == set(leaf_fields()), (
        "the fields LoaderKwargs' keywords set, with NOT_KEYWORDS, are not the bound LoaderOptions fields")


def test_every_keyword_takes_none_and_its_fields_default():
    for keyword, hint in HINTS.items():
        assert admits(hint, None), f"{keyword}: None (the C++ default) is not admitted by {hint}"
        k = KEYWORDS[keyword]
        if k.field is None or k.convert is not None:
            continue  # Python only, or a converted value: the field's type is not the keyword's
        default = _options.field_default(k.field)
        assert admits(hint, default), (f"{keyword}: LoaderOptions.{k.field} defaults to {default!r} "
                                       f"({type(default).__name__}), which LoaderKwargs' {hint} does not admit")


def test_each_listed_literal_is_accepted_by_the_binding():
    listed = {k: literals(h) for k, h in HINTS.items() if literals(h)}
    assert {"format", "layout", "axis", "io", "resident", "unpack", "autotune"} <= set(listed)
    assert set(listed["layout"]) == set(_options._LAYOUT_AXIS)
    for keyword, values in listed.items():
        k = KEYWORDS[keyword]
        for value in values:
            o = _options.build_options(["nowhere"], {keyword: value})
            obj = o
            for part in k.field.split("."):
                obj = getattr(obj, part)
            want = k.convert(value) if k.convert else value
            assert obj == want, f"{keyword}={value!r}: LoaderOptions.{k.field} is {obj!r}"


def test_adaptors_pass_on_the_keywords_they_do_not_take_themselves():
    loader = set(_kwargs.LoaderKwargs.__annotations__)
    assert set(_kwargs.TorchDatasetKwargs.__annotations__) == loader - {"rank", "world_size"}
    assert set(_kwargs.TfDatasetKwargs.__annotations__) == loader - {"ragged"}
    torch_mod = pytest.importorskip("dlfeed.torch")
    params = inspect.signature(torch_mod.Dataset).parameters
    assert {"rank", "world_size"} <= set(params)
    assert params["loader_kwargs"].annotation == "Unpack[TorchDatasetKwargs]"
    tf_mod = pytest.importorskip("dlfeed.tf")
    params = inspect.signature(tf_mod.dataset).parameters
    assert "ragged" in params
    assert params["loader_kwargs"].annotation == "Unpack[TfDatasetKwargs]"


def test_typed_keywords_run_as_before(tmp_path):
    # A LoaderKwargs dict unpacked into the loader: the same batches as the keywords written out.
    np.save(tmp_path / "x.npy", np.arange(40, dtype=np.int32).reshape(20, 2))
    kw: dlfeed.LoaderKwargs = {"fields": "x", "batch_size": 6, "strategy": "global_shuffle", "seed": 3,
                               "drop_last_batch": True, "io": "sync", "resident": "off"}
    got = [b["x"].copy() for b in dlfeed.Loader(tmp_path, **kw)]
    want = [b["x"].copy() for b in dlfeed.Loader(tmp_path, fields="x", batch_size=6, strategy="global_shuffle",
                                                 seed=3, drop_last_batch=True, io="sync", resident="off")]
    assert len(got) == 3 and all(np.array_equal(a, b) for a, b in zip(got, want))
    rows = np.concatenate(got)
    assert len(set(rows[:, 0].tolist())) == 18 and all(r[1] == r[0] + 1 for r in rows)  # 18 distinct samples
    with pytest.raises(TypeError, match=r"'batchsize'.*did you mean 'batch_size'"):
        dlfeed.Loader(tmp_path, **{**kw, "batchsize": 6})
