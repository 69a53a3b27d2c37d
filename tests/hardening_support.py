"""What the hardening tests share: paths, the stress time, pin and table counts, a kernel."""
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import offload
from offload import ErrorCode, OffloadError
from tests.harness import background, run_threads

from .conftest import page_aligned, vmlck_kb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRESS_S = float(os.environ.get("OFFLOAD_STRESS_SECONDS", "60"))
PAGE = os.sysconf("SC_PAGE_SIZE")


def env_with_path(**extra):
    path = os.pathsep.join([ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])
    return dict(os.environ, PYTHONPATH=path, **extra)


def pins():
    return offload.testing.state()["pins"].get("host", {"entries": 0, "bytes": 0,
                                                        "locked_pages": 0})


def totals():
    devs = offload.testing.state()["devices"].values()
    return sum(d["mappings"] for d in devs), sum(d["allocations"] for d in devs)


@pytest.fixture(scope="module")
def k():
    return offload.compile_c(
        "void add_one(int *a, long n) { for (long i = 0; i < n; ++i) a[i] += 1; }\n"
        "void spin(volatile int *flag) { while (!*flag) { } }\n")
