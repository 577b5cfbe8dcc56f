# SPDX-License-Identifier: Apache-2.0
"""A batch's fields as the adaptors hand them out (dlfeed.torch, dlfeed.tf): one rule."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence


def pack(names: Sequence[str], values: Sequence[Any], as_dict: bool = False,
         extra: Optional[Mapping[str, Any]] = None) -> Any:
    """``values`` (one per field, in the order of ``names``) as an element: with
    ``as_dict`` a dict {name: value} (followed by the items of ``extra``), else the
    value itself when there is one field, else a tuple in the fields' order."""
    if as_dict:
        out = dict(zip(names, values))
        if extra:
            out.update(extra)
        return out
    return values[0] if len(values) == 1 else tuple(values)
