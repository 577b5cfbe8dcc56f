# SPDX-License-Identifier: Apache-2.0
"""dlfeed: a C++ data loader for deep-learning training (HDF5, NPZ/NPY, TFRecord).

    import dlfeed
    loader = dlfeed.Loader("data/train", fields=["x", "y"], batch_size=64,
                           strategy="global_shuffle", seed=1)
    for epoch in range(3):
        for batch in loader:              # one epoch per `for`
            x, y = batch["x"], batch["y"]  # numpy arrays in dlfeed's own memory (zero copy)

PyTorch: dlfeed.torch.Dataset; TensorFlow/Keras: dlfeed.tf.dataset (imported on
demand, so `import dlfeed` needs neither framework).
"""
import pkgutil as _pkgutil

# In-tree builds put the compiled _dlfeed in BUILD/python/dlfeed/: with
# PYTHONPATH=python:BUILD/python both halves form one package.
__path__ = _pkgutil.extend_path(__path__, __name__)

try:
    from . import _dlfeed
except ModuleNotFoundError as _e:  # pragma: no cover - a message for a broken set-up
    if _e.name not in ("dlfeed._dlfeed", "_dlfeed"):
        raise  # another module the compiled one needs: its own message
    raise ImportError(
        "dlfeed's compiled module _dlfeed was not found: `pip install .` in the dlfeed checkout, "
        "or build it with CMake (build/python) and put python/ and build/python on PYTHONPATH"
    ) from _e

from ._dlfeed import (  # noqa: E402
    Batch,
    DataError,
    Error,
    InvalidArgumentError,
    NotFoundError,
    ResourceError,
    Tensor,
    decode_state,
    io_uring_available,
    machine_memory_budget,
    strategy_names,
)
from ._kwargs import LoaderKwargs  # noqa: E402
from ._loader import EpochIterator, Loader  # noqa: E402


def _version() -> str:
    # One source, the file VERSION: compiled into _dlfeed (DLFEED_VERSION_STRING);
    # else the installed distribution's metadata; else the tree's VERSION file.
    v = getattr(_dlfeed, "__version__", None)
    if v:
        return v
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("dlfeed")
    except PackageNotFoundError:  # pragma: no cover - an uninstalled, older build
        import pathlib

        return (pathlib.Path(__file__).resolve().parents[2] / "VERSION").read_text().strip()


__version__ = _version()

__all__ = [
    "Batch",
    "DataError",
    "EpochIterator",
    "Error",
    "InvalidArgumentError",
    "Loader",
    "LoaderKwargs",
    "NotFoundError",
    "ResourceError",
    "Tensor",
    "decode_state",
    "io_uring_available",
    "machine_memory_budget",
    "strategy_names",
]


def __getattr__(name):
    # dlfeed.torch and dlfeed.tf on first use: importing a framework is slow.
    if name in ("torch", "tf"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'dlfeed' has no attribute {name!r}")
