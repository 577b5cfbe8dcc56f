# SPDX-License-Identifier: Apache-2.0
"""The keywords of dlfeed.Loader as TypedDicts, for type checkers and IDEs.

``dlfeed.Loader(paths, **options: Unpack[LoaderKwargs])``: a checker sees every
keyword with its type, and flags a misspelt one before the program runs (at run
time dlfeed._options.check_keywords says the same, naming the nearest keyword).
What each keyword sets is in dlfeed._options.KEYWORDS (field, ``dlfeed run`` flag);
tests/python/api/test_options_kwargs.py checks that the keys here are exactly those
keywords, that they reach every option field the C++ binding has, and that each
type admits its field's default. Every keyword also takes None: the C++ default.

dlfeed.torch.Dataset takes ``rank`` and ``world_size`` as its own arguments and
dlfeed.tf.dataset takes ``ragged``, so each passes on the others
(TorchDatasetKwargs, TfDatasetKwargs): a TypedDict unpacked into ``**kwargs`` may
not repeat a named parameter.
"""
from __future__ import annotations

import os
from typing import Any, Literal, Mapping, Optional, Sequence, TypedDict, Union

import numpy as np
import numpy.typing as npt

PathLike = Union[str, "os.PathLike[str]"]
# The loader's three-way switches (LoaderOptions resident, unpack, autotune).
Mode = Literal["auto", "on", "off"]

__all__ = ["LoaderKwargs", "TfDatasetKwargs", "TorchDatasetKwargs"]


class OptionKwargs(TypedDict, total=False):
    """Every keyword but rank, world_size and ragged (see the module's docstring)."""

    fields: Optional[Union[str, Sequence[str], Mapping[str, PathLike]]]
    batch_size: Optional[int]
    drop_last_batch: Optional[bool]
    # order (OrderSpec)
    strategy: Optional[str]
    seed: Optional[int]
    shard_drop_last: Optional[bool]
    buffer_size: Optional[int]
    block_size: Optional[int]
    window: Optional[int]
    indices: Optional[Union[Sequence[int], np.ndarray]]
    # format (FormatOptions)
    format: Optional[Literal["auto", "npy", "npz", "hdf5", "tfrecord", "indexed_binary"]]
    layout: Optional[Literal["dlio", "plain", "auto"]]
    axis: Optional[Literal["first", "last", "none", "auto"]]
    name: Optional[str]
    feature: Optional[str]
    feature_dtype: Optional[npt.DTypeLike]
    feature_shape: Optional[Sequence[int]]
    shape_feature: Optional[str]
    verify_crc: Optional[bool]
    use_index_files: Optional[bool]
    write_index_files: Optional[bool]
    index_dir: Optional[PathLike]
    index_cache: Optional[PathLike]
    index_cache_check: Optional[str]
    # I/O (IoOptions) and the pipeline
    io: Optional[Literal["auto", "io_uring", "thread_pool", "sync"]]
    queue_depth: Optional[int]
    max_bytes_in_flight: Optional[int]
    checksum_round_bytes: Optional[int]
    register_files: Optional[bool]
    io_threads: Optional[int]
    io_engines: Optional[int]
    io_spread_always: Optional[bool]
    direct: Optional[bool]
    max_open_files: Optional[int]
    prefetch: Optional[str]
    max_gap: Optional[int]
    adaptive_gap: Optional[bool]
    max_read: Optional[int]
    coalesce: Optional[bool]
    split_above: Optional[int]
    split_piece: Optional[int]
    split_piece_cold: Optional[int]
    large_above: Optional[int]
    large_piece: Optional[int]
    fadvise_willneed: Optional[bool]
    resident: Optional[Mode]
    unpack: Optional[Mode]
    memory_budget: Optional[int]
    threads: Optional[int]
    autotune: Optional[Union[bool, Mode]]
    # trace (counters::TraceOptions)
    trace: Optional[bool]
    trace_max_events: Optional[int]
    trace_io_sample: Optional[int]
    trace_pid: Optional[int]
    trace_process_name: Optional[str]
    # staging (staging::StageOptions)
    stage_dir: Optional[PathLike]
    stage_limit: Optional[int]
    stage_sync: Optional[bool]
    # object stores (ObjectCacheOptions)
    cache_dir: Optional[PathLike]
    cache_limit: Optional[int]
    # the job cache under mpirun (dlfeed::mpi::JobCache): bytes per node, ranks per node
    mpi: Optional[bool]
    job_cache: Optional[Union[int, str]]
    job_cache_ranks_per_node: Optional[int]
    job_cache_folder: Optional[PathLike]
    # {field: dtype}: LoaderOptions field_dtypes
    dtypes: Optional[Mapping[str, Any]]
    # {field: sample shape}: LoaderOptions field_shapes, and a view of the decoded samples
    shapes: Optional[Mapping[str, Sequence[int]]]


class ShardKwargs(TypedDict, total=False):
    """This rank and the number of ranks (OrderSpec rank, world_size)."""

    rank: Optional[int]
    world_size: Optional[int]


class RaggedKwargs(TypedDict, total=False):
    """Samples of different shapes in a field (LoaderOptions ragged)."""

    ragged: Optional[bool]


class LoaderKwargs(OptionKwargs, ShardKwargs, RaggedKwargs, total=False):
    """The keywords of dlfeed.Loader: ``**options: Unpack[LoaderKwargs]``."""


class TorchDatasetKwargs(OptionKwargs, RaggedKwargs, total=False):
    """The keywords dlfeed.torch.Dataset passes on to dlfeed.Loader (rank, world_size are its own)."""


class TfDatasetKwargs(OptionKwargs, ShardKwargs, total=False):
    """The keywords dlfeed.tf.dataset passes on to dlfeed.Loader (ragged is its own)."""
