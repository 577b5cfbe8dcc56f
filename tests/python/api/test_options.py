# SPDX-License-Identifier: Apache-2.0
"""The options schema: every C++ option field is bound, every bound field has a
keyword of dlfeed.Loader (or a reason it has none), every keyword reaches its
field, and names a `dlfeed run` flag or says why there is none."""
import json
import re
import subprocess

import numpy as np
import pytest

import dlfeed
from dlfeed import _dlfeed, _options
from conftest import dlfeed_binary

KEYWORDS = _options.KEYWORDS


def option_structs():
    """{class name: class} of LoaderOptions and every option struct inside it."""
    out = {}

    def walk(cls):
        out[cls.__name__] = cls
        for name, v in vars(cls).items():
            if isinstance(v, property):
                sub = type(getattr(cls(), name))
                if getattr(sub, "__module__", "") == _dlfeed.__name__:
                    walk(sub)

    walk(_dlfeed.LoaderOptions)
    return out


def leaf_fields(cls=_dlfeed.LoaderOptions, prefix=""):
    """Paths of the bound fields that hold values (nested option structs are walked)."""
    paths = []
    for name, v in vars(cls).items():
        if not isinstance(v, property):
            continue
        sub = type(getattr(cls(), name))
        if getattr(sub, "__module__", "") == _dlfeed.__name__:
            paths += leaf_fields(sub, f"{prefix}{name}.")
        else:
            paths.append(prefix + name)
    return paths


def test_every_cpp_member_is_bound_or_listed_as_unbound():
    described = _dlfeed._option_structs()
    structs = option_structs()
    assert set(described) == set(structs), "bind_options.cpp describes other structs than LoaderOptions holds"
    for name, (members, unbound) in described.items():
        bound = [k for k, v in vars(structs[name]).items() if isinstance(v, property)]
        assert not set(bound) & set(unbound), f"{name}: {set(bound) & set(unbound)} both bound and listed as unbound"
        assert len(bound) + len(unbound) == members, (
            f"C++ {name} has {members} members, bindings/python/bind_options.cpp binds {len(bound)} ({bound}) and "
            f"lists {len(unbound)} as unbound ({sorted(unbound)}): bind the new member (def_readwrite with a doc) "
            f"and give it a keyword in python/dlfeed/_options.py, or list it as unbound with the reason")


def test_every_bound_field_has_a_keyword_or_a_reason():
    fields = leaf_fields()
    reached = {k.field for k in KEYWORDS.values() if k.field is not None}
    missing = [f for f in fields if f not in reached and f not in _options.NOT_KEYWORDS]
    assert not missing, (f"LoaderOptions fields no dlfeed.Loader keyword sets: {missing}; add them to KEYWORDS in "
                         f"python/dlfeed/_options.py, or to NOT_KEYWORDS with the reason")
    stale = sorted((reached | set(_options.NOT_KEYWORDS)) - set(fields))
    assert not stale, f"_options.py names fields LoaderOptions does not have: {stale}"
    assert not reached & set(_options.NOT_KEYWORDS), "a field both has a keyword and is listed as having none"
    for path in fields:
        assert _options.field_doc(path), f"LoaderOptions.{path} has no docstring in bind_options.cpp"


# Values of the keywords whose field is not a plain bool or int (each differs from the C++ default).
SPECIAL = {
    "fields": ("x", ["x"]),
    "strategy": ("global_shuffle", "global_shuffle"),
    "indices": ([3, 1, 2], None),
    "format": ("npz", "npz"),
    "layout": ("dlio", "last"),
    "axis": ("first", "first"),
    "name": ("x", "x"),
    "feature": ("label", "label"),
    "feature_dtype": (np.float32, "float32"),
    "feature_shape": ([2, 3], (2, 3)),
    "dtypes": ({"x": np.uint8}, {"x": "uint8"}),
    "shape_feature": ("size", "size"),
    "index_dir": ("/tmp/idx", "/tmp/idx"),
    "index_cache": ("auto", "auto"),
    "index_cache_check": ("folders", "folders"),
    "io": ("sync", "sync"),
    "prefetch": ("depth:2", "depth:2"),
    "resident": ("off", "off"),
    "unpack": ("off", "off"),
    "autotune": (True, "on"),
    "trace_process_name": ("rank 3", "rank 3"),
    "stage_dir": ("/tmp/stage", "/tmp/stage"),
    "cache_dir": ("/tmp/object-cache", "/tmp/object-cache"),
}


@pytest.mark.parametrize("keyword", [k for k, v in KEYWORDS.items() if v.field is not None])
def test_each_keyword_sets_its_field(keyword):
    field = KEYWORDS[keyword].field
    default = _options.field_default(field)
    if keyword in SPECIAL:
        given, expected = SPECIAL[keyword]
    elif isinstance(default, bool):
        given = expected = not default
    elif isinstance(default, int):
        given = expected = 7 if default < 0 else default - 3 if default > 1 << 62 else default + 3
    else:
        pytest.fail(f"no test value for {keyword} ({field}, default {default!r}): add one to SPECIAL")
    o = _options.build_options(["d"], {keyword: given})
    value = getattr(*_split(o, field))
    if keyword == "indices":
        assert value.tolist() == given
    else:
        assert value == expected and value != default, (keyword, value, default)
    # Nothing else moved: every other field keeps its default.
    for other in leaf_fields():
        if other in (field, "paths", "order.params.indices"):
            continue
        got, was = getattr(*_split(o, other)), _options.field_default(other)
        assert got == was, f"{keyword}= also changed {other}: {got!r} (default {was!r})"


def _split(o, path):
    *parents, last = path.split(".")
    for p in parents:
        o = getattr(o, p)
    return o, last


def test_byte_keywords_take_sizes_as_the_flags_and_job_cache_do():
    # cache_limit="1G" was "expected int" where --cache-limit 1G and job_cache="1G" are taken.
    o = _options.build_options(["d"], {"memory_budget": "8G", "stage_limit": "200G", "cache_limit": "512M"})
    assert (o.memory_budget, o.stage.limit_bytes, o.object_cache.max_bytes) == (8 << 30, 200 << 30, 512 << 20)
    o = _options.build_options(["d"], {"memory_budget": np.int64(3 << 30), "cache_limit": np.uint32(7)})  # as before
    assert (o.memory_budget, o.object_cache.max_bytes) == (3 << 30, 7)
    for keyword in ("memory_budget", "stage_limit", "cache_limit"):
        with pytest.raises(dlfeed.InvalidArgumentError, match=f"{keyword}='lots': expected a byte count"):
            _options.build_options(["d"], {keyword: "lots"})
        for bad in (-1, "\u00b2M", 1.5):
            with pytest.raises(dlfeed.InvalidArgumentError, match=f"{keyword}=.*: expected a byte count"):
                _options.build_options(["d"], {keyword: bad})


def test_unknown_keyword_is_a_type_error_naming_the_nearest():
    with pytest.raises(TypeError, match=r"'batchsize'.*did you mean 'batch_size'"):
        dlfeed.Loader("nowhere", batchsize=3)
    # A field's C++ name suggests the keyword that sets it.
    with pytest.raises(TypeError, match=r"'limit_bytes'.*did you mean 'stage_limit'"):
        dlfeed.Loader("nowhere", limit_bytes=3)
    with pytest.raises(TypeError, match=r"'drop_last'.*did you mean 'shard_drop_last'"):
        dlfeed.Loader("nowhere", drop_last=True)
    with pytest.raises(TypeError, match=r"'qqq'.*the keywords are fields, batch_size"):
        dlfeed.Loader("nowhere", qqq=1)
    with pytest.raises(TypeError, match=r"batch_size='ten': expected int"):
        dlfeed.Loader("nowhere", batch_size="ten")


def test_torch_dataset_checks_keywords_when_made():
    torch_mod = pytest.importorskip("dlfeed.torch")
    with pytest.raises(TypeError, match=r"dlfeed.torch.Dataset\(\).*'io_thread'.*did you mean 'io_threads'"):
        torch_mod.Dataset("nowhere", io_thread=2)  # no loader (and no file) is touched before the check


def test_signature_types_the_keywords():
    import inspect
    import sys

    params = inspect.signature(dlfeed.Loader).parameters
    # paths, then dlfeed.Loader's own GPU and epoch keywords (docs/python.md), which set no option field, then
    # the LoaderOptions keywords as one **options typed by the LoaderKwargs TypedDict (test_options_kwargs.py).
    gpu = ["device", "pin_memory", "h2d_budget", "device_prefetch", "overlap_epochs"]
    assert list(params) == ["paths", *gpu, "options"]
    assert params["options"].kind is inspect.Parameter.VAR_KEYWORD
    assert params["options"].annotation == "Unpack[LoaderKwargs]"
    assert params["device"].default is None and params["pin_memory"].default is False
    if sys.version_info >= (3, 11):  # typing.Unpack exists: the annotation evaluates
        import typing

        hint = typing.get_type_hints(dlfeed.Loader.__init__)["options"]
        assert typing.get_args(hint) == (dlfeed.LoaderKwargs,)
    for keyword in KEYWORDS:
        assert f"    {keyword}" in dlfeed.Loader.__doc__


def test_every_keyword_has_a_run_flag_or_is_python_only(dlfeed):
    # `dlfeed run` builds its LoaderOptions from absl flags declared in several
    # files (run.cc, common_flags.cc, run_scale.cc), some in other units
    # (--memory-budget-mb) or inverted (--no-coalesce); the table names each
    # keyword's flag and this checks the flag is there.
    help_text = dlfeed.run("run", "--help").stdout
    flags = set(re.findall(r"--([a-z0-9-]+)", help_text))
    for keyword, k in KEYWORDS.items():
        assert (k.flag is None) != (k.python_only is None), f"{keyword}: give either a run flag or why it has none"
        if k.flag is not None:
            assert k.flag in flags, f"{keyword}: `dlfeed run` has no --{k.flag}"


def test_trace_format_aliases_work_from_python(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.arange(32, dtype=np.float32).reshape(16, 2))
    loader = dlfeed.Loader(tmp_path, fields="x", batch_size=4, trace=True)
    assert sum(len(b) for b in loader) == 16
    loader.write_trace(tmp_path / "t.json", format="perfetto")  # = chrome
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert any(e.get("ph") == "X" for e in events)
    loader.write_trace(tmp_path / "t.pfw", format="pfw")  # = dftracer: one JSON object per line
    lines = [ln for ln in (tmp_path / "t.pfw").read_text().splitlines() if ln.strip() not in ("[", "]", "")]
    assert lines and all(json.loads(ln.rstrip(","))["ph"] in ("X", "M") for ln in lines)
    with pytest.raises(dlfeed.InvalidArgumentError) as e:
        loader.write_trace(tmp_path / "t.x", format="speedscope")
    msg = str(e.value)
    assert "speedscope" in msg and all(n in msg for n in ("chrome", "perfetto", "dftracer", "pfw")), msg


def test_run_trace_format_error_lists_the_names(dlfeed, tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((4, 2), np.float32))
    err = dlfeed.error("run", "--trace", tmp_path / "t", "--trace-format", "speedscope", tmp_path / "a.npz")
    assert "speedscope" in err and "perfetto" in err and "pfw" in err, err
    out = dlfeed.run("run", "--quiet", "--trace", tmp_path / "t.json", "--trace-format", "perfetto",
                     "--fields", "x", tmp_path / "a.npz")
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"], out.stdout
