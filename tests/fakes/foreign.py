"""Test double: a 'foreign library' device array over memory of an offload host device,
exporting the CUDA Array Interface v3 (with a stream) or DLPack on a GPU device kind,
like CuPy and PyTorch do, so the import path runs without a GPU."""
from __future__ import annotations

from typing import Any

import numpy as np

from offload.dlpack import KDL_CUDA, make_capsule


class CAIArray:
    """`__cuda_array_interface__` v3 over (ptr, shape, dtype); `stream` as reported."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any, stream: int | None = None,
                 strides: tuple[int, ...] | None = None, read_only: bool = False):
        self.ptr, self.shape, self.dtype, self.stream = ptr, shape, np.dtype(dtype), stream
        self.strides = strides                              # bytes, as the interface has them
        self.read_only = read_only
        self.mask: Any = None

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, self.read_only),
                "version": 3, "strides": self.strides, "stream": self.stream,
                "mask": self.mask}


class DLPackArray:
    """`__dlpack__` / `__dlpack_device__` reporting a CUDA device; records the stream
    the consumer asked for."""

    def __init__(self, ptr: int, shape: tuple[int, ...], dtype: Any,
                 strides: tuple[int, ...] | None = None, read_only: bool = False):
        self.ptr, self.shape, self.dtype = ptr, shape, np.dtype(dtype)
        self.strides = strides                              # elements, as DLPack has them
        self.read_only = read_only                          # (only a 1.x capsule says so)
        self.asked: list[Any] = []

    def __dlpack_device__(self) -> tuple[int, int]:
        return KDL_CUDA, 0

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, **_: Any) -> Any:
        self.asked.append(stream)
        return make_capsule(self.ptr, (KDL_CUDA, 0), self.shape, self.strides, self.dtype,
                            self.read_only, self, max_version is not None)
