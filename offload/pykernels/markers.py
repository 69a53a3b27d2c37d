"""The names a Python kernel calls: `prange` (its parallel loop) and the atomics. Called
outside a compiled kernel they do the same work one step at a time, so a kernel is also
a plain Python function."""
from __future__ import annotations

from typing import Any


def prange(*args: int) -> range:
    """A kernel's parallel loop, `for i in offload.prange([start,] stop[, step])`, with
    `range`'s arguments: its iterations run at once (threads on the host, the launch's
    teams x threads on a GPU), and all of them finish before the next statement."""
    return range(*args)


def atomic_add(array: Any, index: Any, value: Any) -> Any:
    """`array[index] += value` as one indivisible step; the old value."""
    old = array[index]
    array[index] = old + value
    return old


def atomic_max(array: Any, index: Any, value: Any) -> Any:
    """`array[index] = max(array[index], value)` as one indivisible step; the old value."""
    old = array[index]
    if value > old:
        array[index] = value
    return old


def atomic_min(array: Any, index: Any, value: Any) -> Any:
    """`array[index] = min(array[index], value)` as one indivisible step; the old value."""
    old = array[index]
    if value < old:
        array[index] = value
    return old
