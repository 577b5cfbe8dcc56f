# SPDX-License-Identifier: Apache-2.0
"""The keywords of dlfeed.Loader, in one table.

Each keyword sets one field of the C++ ``dlfeed::LoaderOptions``, named by its
path in the bound struct (``_dlfeed.LoaderOptions``, bindings/python/bind_options.cpp):
``shard_drop_last`` sets ``order.drop_last``. dlfeed.torch.Dataset and
dlfeed.tf.dataset take the same keywords and pass them on. Each row also names
the ``dlfeed run`` flag that sets the same field, or says why there is none.

tests/python/api/test_options.py checks that every bound field is reachable from a
keyword here or listed in NOT_KEYWORDS with a reason, and that every flag named
here exists. The keywords' types, for type checkers, are dlfeed._kwargs.LoaderKwargs,
a TypedDict that scripts/gen_kwargs.py writes from this table (each row's `type`,
or its field's default's type); docs/options.md is written from it too
(scripts/gen_options_doc.py), and tests fail while either is stale.
"""
from __future__ import annotations

import difflib
import operator
import os
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from . import _dlfeed


class Keyword(NamedTuple):
    # Path of the field in _dlfeed.LoaderOptions; None: not an option of the
    # C++ loader (handled by dlfeed.Loader itself).
    field: Optional[str]
    # The `dlfeed run` flag that sets the same field (its units may differ:
    # --memory-budget-mb), or None with python_only saying why there is none.
    flag: Optional[str] = None
    python_only: Optional[str] = None
    # The keyword's value to the field's (None: as given).
    convert: Optional[Callable[[Any], Any]] = None
    # What the keyword takes, where the field's own doc does not say it.
    note: str = ""
    # Said after the field's own doc (what the keyword takes besides).
    also: str = ""
    # The flag's own default where it is not the field's, and why (else the
    # flag defaults to the field's C++ default; tests/python/cli/test_cli_help.py).
    flag_default: Optional[str] = None
    # The keyword's type for checkers, as dlfeed._kwargs.LoaderKwargs writes it
    # (always also None); None: the field's default's type (bool, int or str).
    # scripts/gen_kwargs.py writes _kwargs.py from these.
    type: Optional[str] = None


def _fields(v: Any) -> List[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, Mapping):
        # {name: file pattern}: the C++ loader's "NAME=PATTERN" fields, paired by what '*' matched.
        out = []
        for name, pattern in v.items():
            p = os.fspath(pattern)
            if "*" not in p:
                # Without its '*' the C++ loader would take "NAME=PATTERN" for one plain name.
                raise _dlfeed.InvalidArgumentError(
                    f"field '{name}={p}': expected {{name: file pattern}} with exactly one '*' in the file name "
                    "({'x': '*_data.npy'}, or '*_data.h5:climate/data' with a member): files pair by what it matched")
            out.append(f"{name}={p}")
        return out
    return list(v)


def _on_off(v: Any) -> str:
    if v is True:
        return "on"
    if v is False:
        return "off"
    return str(v)


def _strategy(v: str) -> str:
    if v not in _dlfeed.strategy_names():
        # The C++ registry says NotFound; for a Python caller it is a bad argument.
        raise _dlfeed.InvalidArgumentError(
            f"unknown order strategy {v!r} (known: {', '.join(_dlfeed.strategy_names())})")
    return v


_LAYOUT_AXIS = {"dlio": "last", "plain": "first", "auto": "auto"}


def _layout(v: str) -> str:
    if v not in _LAYOUT_AXIS:
        raise _dlfeed.InvalidArgumentError(f"layout {v!r}: expected 'dlio', 'plain' or 'auto'")
    return _LAYOUT_AXIS[v]


def _dtype_name(dt: Any) -> str:
    if isinstance(dt, str):
        return dt
    return np.dtype(dt).str  # numpy types, np.dtype objects: '<f4'


def _shape(v: Any) -> Tuple[int, ...]:
    return tuple(int(d) for d in v)


_NO_FLAG = "no `dlfeed run` flag yet"

KEYWORDS: Dict[str, Keyword] = {
    "fields": Keyword("fields", "fields", convert=_fields,
                      note="a name, a list of names, or {name: file pattern} ({'x': '*_data.npy', 'y': "
                           "'*_label.npy'}: files paired by what '*' matched; --fields x=*_data.npy,y=*_label.npy)",
                      type="Union[str, Sequence[str], Mapping[str, PathLike]]"),
    "batch_size": Keyword("batch_size", "batch-size"),
    "drop_last_batch": Keyword("drop_last_batch", "drop-last-batch"),
    "ragged": Keyword("ragged", "ragged"),
    # per field: dtype where the files do not record it (TFRecord features)
    "dtypes": Keyword("field_dtypes", "field-dtypes", convert=lambda v: {k: _dtype_name(d) for k, d in v.items()},
                      note="{field: dtype}: a TFRecord bytes feature's element type, per field ({'x': np.uint8}; "
                           "--field-dtypes 'x=uint8'); a field not named takes feature_dtype; a dtype a field's "
                           "files do not give (an NPY array's own) is an error",
                      type="Mapping[str, Any]"),
    # order (OrderSpec)
    "strategy": Keyword("order.strategy", "strategy", convert=_strategy),
    "seed": Keyword("order.seed", "seed", flag_default="42: the flag also seeds `dlfeed generate`'s content"),
    "rank": Keyword("order.rank", "rank"),
    "world_size": Keyword("order.world_size", "world-size"),
    "shard_drop_last": Keyword("order.drop_last", "drop-last"),
    "buffer_size": Keyword("order.params.buffer_size", "buffer-size"),
    "block_size": Keyword("order.params.block_size", "block-size"),
    "window": Keyword("order.params.window", "window"),
    "indices": Keyword("order.params.indices", python_only="an explicit order is a sequence of sample ids",
                       type="Union[Sequence[int], np.ndarray]"),
    # format (FormatOptions)
    "format": Keyword("format.format", "format",
                      type='Literal["auto", "npy", "npz", "hdf5", "tfrecord", "indexed_binary"]'),
    "layout": Keyword("format.axis", "layout", convert=_layout,
                      note="'dlio': samples on the last axis (axis='last'); 'plain': the first; 'auto'",
                      type='Literal["dlio", "plain", "auto"]'),
    "axis": Keyword("format.axis", "axis", type='Literal["first", "last", "none", "auto"]'),
    "name": Keyword("format.name", "name"),
    "feature": Keyword("format.feature", "feature"),
    "feature_dtype": Keyword("format.feature_dtype", "feature-dtype", convert=_dtype_name,
                             note="a name, a descriptor or a numpy dtype", type="npt.DTypeLike"),
    "feature_shape": Keyword("format.feature_shape", "feature-shape", convert=_shape, type="Sequence[int]"),
    "shape_feature": Keyword("format.shape_feature", "shape-feature"),
    "verify_crc": Keyword("format.verify_crc", "no-verify-crc"),
    "use_index_files": Keyword("format.use_index_files", "no-index-files"),
    "write_index_files": Keyword("format.write_index_files", "write-index"),
    "index_dir": Keyword("format.index_dir", "index-dir", convert=os.fspath, type="PathLike"),
    "index_cache": Keyword("format.index_cache", "index-cache", convert=os.fspath, type="PathLike"),
    "index_cache_check": Keyword("format.index_cache_check", "index-cache-check"),
    # I/O (IoOptions) and the pipeline
    "io": Keyword("io.kind", "io", type='Literal["auto", "io_uring", "thread_pool", "sync"]'),
    "queue_depth": Keyword("io.queue_depth", "queue-depth"),
    "max_bytes_in_flight": Keyword("io.max_bytes_in_flight", "max-in-flight-mb"),
    "checksum_round_bytes": Keyword("io.checksum_round_bytes", python_only=_NO_FLAG),
    "register_files": Keyword("io.register_files", python_only=_NO_FLAG),
    "io_threads": Keyword("io.threads", "io-threads"),
    "io_engines": Keyword("advanced.io_engines", "io-engines"),
    "io_spread_always": Keyword("advanced.tuning.io_spread_always", "io-spread-always"),
    "direct": Keyword("io.direct", "direct"),
    "max_open_files": Keyword("advanced.max_open_files", python_only=_NO_FLAG),
    "prefetch": Keyword("advanced.prefetch", "prefetch"),
    "max_gap": Keyword("advanced.coalesce.max_gap", "max-gap"),
    "adaptive_gap": Keyword("advanced.coalesce.adaptive_gap", "max-gap",
                            note="the command line's --max-gap, when given, is a fixed gap (adaptive_gap=False)",
                            flag_default="--max-gap not given"),
    "max_read": Keyword("advanced.coalesce.max_read", "max-read"),
    "coalesce": Keyword("advanced.coalesce.enabled", "no-coalesce"),
    "split_above": Keyword("advanced.coalesce.split_above", "split-above"),
    "split_piece": Keyword("advanced.coalesce.split_piece", "split-piece"),
    "split_piece_cold": Keyword("advanced.coalesce.split_piece_cold", "split-piece-cold"),
    "large_above": Keyword("advanced.coalesce.large_above", "large-above"),
    "large_piece": Keyword("advanced.coalesce.large_piece", "large-piece"),
    "fadvise_willneed": Keyword("advanced.fadvise_willneed", "fadvise"),
    "resident": Keyword("resident", "resident", type="Mode"),
    "unpack": Keyword("unpack", "unpack", type="Mode"),
    "memory_budget": Keyword("memory_budget", "memory-budget-mb", convert=lambda v: byte_count(v, "memory_budget"),
                             also="(Python: an int, or a string like '8G', powers of 1024)", type="Union[int, str]"),
    "threads": Keyword("threads", "threads"),
    "autotune": Keyword("autotune", "autotune", convert=_on_off,
                        note="True (on), False (off) or 'auto' (on with 4 cores or more)", type="Union[bool, Mode]"),
    # trace (counters::TraceOptions)
    "trace": Keyword("trace.enabled", "trace", note="True: record trace events (Loader.write_trace)"),
    "trace_max_events": Keyword("trace.max_events", "trace-max-events"),
    "trace_io_sample": Keyword("trace.io_sample_every", "trace-io-sample"),
    "trace_pid": Keyword("trace.pid", python_only=_NO_FLAG),
    "trace_process_name": Keyword("trace.process_name", python_only=_NO_FLAG),
    # staging (staging::StageOptions)
    "stage_dir": Keyword("stage.dir", "stage-to", convert=os.fspath, type="PathLike"),
    "stage_limit": Keyword("stage.limit_bytes", "stage-limit", convert=lambda v: byte_count(v, "stage_limit"),
                           also="(Python: an int, or a string like '200G', powers of 1024)", type="Union[int, str]"),
    "stage_sync": Keyword("stage.sync", "stage-sync"),
    # object stores (ObjectCacheOptions)
    "cache_dir": Keyword("object_cache.dir", "cache-dir", convert=os.fspath, type="PathLike"),
    "cache_limit": Keyword("object_cache.max_bytes", "cache-limit", convert=lambda v: byte_count(v, "cache_limit"),
                           also="(Python: an int, or a string like '200G', powers of 1024)", type="Union[int, str]"),
    # a rank of an MPI job (dlfeed::mpi::Job; not a LoaderOptions field)
    "mpi": Keyword(None, "mpi",
                   note="True: under mpirun/srun, rank and world size from MPI, and rank 0 lists and indexes the "
                        "files or objects for the job, the others receive the index (one listing per job; "
                        "docs/distributed.md)", type="bool"),
    "mpi_comm": Keyword(None, python_only="an MPI communicator is a Python object (mpi4py's)",
                        note="with mpi=True or job_cache: the ranks are those of this mpi4py communicator (a "
                             "data-parallel group made with comm.Split, say), not of MPI_COMM_WORLD; implies "
                             "mpi=True", type="Any"),
    # the job cache under mpirun (dlfeed::mpi::JobCache; not a LoaderOptions field)
    "job_cache": Keyword(None, "cache",
                         note="bytes of the job cache per node (an int, or '64G'): under mpirun, later epochs read "
                              "the first epoch's bytes from the ranks' memory, not the files (docs/distributed.md)",
                         type="Union[int, str]"),
    "job_cache_ranks_per_node": Keyword(None, "cache-ranks-per-node",
                                        note="with job_cache: ranks per node (0: as MPI finds shared memory; 1: each "
                                             "rank its own node)", type="int"),
    "job_cache_folder": Keyword(None, "cache-folder",
                                note="with job_cache: each rank's share in a file in this node-local folder, not "
                                     "memory (the cache may outgrow memory)", type="PathLike"),
    # per field: shape where the files do not record it (TFRecord features)
    "shapes": Keyword(None, "field-shapes",
                      note="{field: sample shape}: a TFRecord feature is read with that shape (LoaderOptions "
                           "field_shapes: raw bytes straight into the batch; () a scalar); other formats' samples "
                           "are viewed with it (same element count)", type="Mapping[str, Sequence[int]]"),
}

# Fields of the bound LoaderOptions (and the structs in it) that no keyword sets, and why.
NOT_KEYWORDS: Dict[str, str] = {
    "paths": "dlfeed.Loader's positional argument",
    "order.epoch": "the loader sets it per epoch (for batch in loader; iter_epoch(e))",
    "order.global_start": "the loader sets it when it restores a state saved on another world size",
    "buffer_allocator": "dlfeed.Loader's pin_memory= and device= set it (page-locked pool buffers)",
    "format.file_pattern": "set per field by fields={name: file pattern}",
    "field_shapes": "set from shapes= for the fields named in fields=",
}


def byte_count(v: Any, keyword: str) -> int:
    """An int, or a string like '512M', '64G' (powers of 1024), as bytes."""
    if not isinstance(v, (bool, str)):
        try:
            n = operator.index(v)  # an int, or numpy's
        except TypeError:
            n = -1
        if n >= 0:
            return n
    if isinstance(v, str):
        t = v.strip().upper().removesuffix("B")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(t[-1:], 1)
        digits = t[:-1] if mult != 1 else t
        if digits.isascii() and digits.isdecimal():
            return int(digits) * mult
    raise _dlfeed.InvalidArgumentError(f"{keyword}={v!r}: expected a byte count (an int, or e.g. '512M', '64G')")


def field_doc(path: str) -> str:
    """The bound field's docstring (from the C++ binding)."""
    cls: Any = _dlfeed.LoaderOptions
    parts = path.split(".")
    for part in parts[:-1]:
        cls = type(getattr(cls(), part))
    prop = getattr(cls, parts[-1])
    doc = (prop.__doc__ or "").strip()
    # pybind11 puts the getter's signature first for def_property_readonly docs; keep the text.
    return doc.split("\n\n", 1)[-1] if doc.startswith("(") else doc


def field_default(path: str) -> Any:
    value: Any = _dlfeed.LoaderOptions()
    for part in path.split("."):
        value = getattr(value, part)
    return value


def unknown_keyword(name: str, where: str) -> TypeError:
    """A TypeError naming `name` and the keyword nearest to it."""
    guess: Optional[str] = None
    for keyword, k in KEYWORDS.items():  # a field's own name: the keyword that sets it
        if k.field is not None and name in (k.field, k.field.rsplit(".", 1)[-1]):
            guess = keyword
            break
    if guess is None:
        close = difflib.get_close_matches(name, list(KEYWORDS), n=1, cutoff=0.6)
        guess = close[0] if close else None
    hint = f"; did you mean {guess!r}?" if guess else f"; the keywords are {', '.join(KEYWORDS)}"
    return TypeError(f"{where} got an unexpected keyword argument {name!r}{hint}")


def check_keywords(kwargs: Mapping[str, Any], where: str) -> None:
    """Raises TypeError for a name that is not a keyword of KEYWORDS."""
    for name in kwargs:
        if name not in KEYWORDS:
            raise unknown_keyword(name, where)


def _resolve(options: Any, path: str) -> Tuple[Any, str]:
    parts = path.split(".")
    obj = options
    for part in parts[:-1]:
        obj = getattr(obj, part)  # nested structs are references into `options`
    return obj, parts[-1]


def build_options(paths: List[str], kwargs: Mapping[str, Any], where: str = "dlfeed.Loader()") -> Any:
    """_dlfeed.LoaderOptions from keywords (None keeps the C++ default)."""
    check_keywords(kwargs, where)
    o = _dlfeed.LoaderOptions()
    o.paths = paths
    set_by: Dict[str, Tuple[str, Any, Any]] = {}  # field -> (keyword, value given, value set)
    for keyword, value in kwargs.items():
        k = KEYWORDS[keyword]
        if value is None or k.field is None:
            continue
        converted = k.convert(value) if k.convert else value
        earlier = set_by.get(k.field)
        if earlier is not None and earlier[2] != converted:
            raise _dlfeed.InvalidArgumentError(
                f"{earlier[0]}={earlier[1]!r} sets {k.field} to {earlier[2]!r}; {keyword}={value!r} contradicts it")
        set_by[k.field] = (keyword, value, converted)
        obj, attr = _resolve(o, k.field)
        try:
            if isinstance(converted, bool) and _is_int(getattr(obj, attr)):
                raise TypeError  # True is no batch size (pybind11 takes it as 1)
            setattr(obj, attr, converted)
        except TypeError:
            top = _unsigned_top(k.field) if _is_int(converted) and _is_int(getattr(obj, attr)) else None
            if top is not None:  # an int out of an unsigned field's range, not a wrong type
                raise _dlfeed.InvalidArgumentError(
                    f"{where}: {keyword}={value!r}: expected an int from 0 to {top} "
                    f"(LoaderOptions.{k.field})") from None
            expected = type(getattr(obj, attr)).__name__
            raise TypeError(f"{where}: {keyword}={value!r}: expected {expected} (LoaderOptions.{k.field})") from None
    return o


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _unsigned_top(field: str) -> Optional[int]:
    """The largest value of an unsigned integer field (found by trying), or None when it takes negatives."""
    obj, attr = _resolve(_dlfeed.LoaderOptions(), field)
    try:
        setattr(obj, attr, -1)
        return None
    except TypeError:
        pass
    for bits in (8, 16, 32, 64):
        try:
            setattr(obj, attr, 1 << bits)
        except TypeError:
            return (1 << bits) - 1
    return None


def keyword_help() -> str:
    """One line per keyword: the field it sets and what that does, for docstrings."""
    lines = []
    for keyword, k in KEYWORDS.items():
        what = " ".join(filter(None, [k.note or (field_doc(k.field) if k.field else ""), k.also]))
        target = f" ({k.field})" if k.field and k.field != keyword else ""
        lines.append(f"    {keyword}{target}: {what}")
    return "\n".join(lines)
