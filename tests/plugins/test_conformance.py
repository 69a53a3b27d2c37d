"""The plugin contract (offload.testing.run_conformance) against every plugin
this repository has: the host plugin, the recording double, the template package (imported,
and installed so its entry point is found); the HSA simulator and CUDA run it in
tests/plugins/amdgpu/test_amdgpu.py and tests/plugins/cuda/test_cuda_faults.py."""
import os
import subprocess
import sys

import pytest

import offload
from offload.config import Config
from offload.plugins.host import HostPlugin
from offload.testing import ConformanceError, run_conformance
from tests.fakes.recording import ForeignErrorPlugin, RecordingPlugin, ShortCopyPlugin

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATE = os.path.join(ROOT, "examples", "plugin_template")
SOURCE = "void add_one(int *a, long lo, long hi) { for (long i = lo; i < hi; ++i) a[i] += 1; }"


@pytest.fixture(scope="module")
def image():
    return offload.compile_c(SOURCE)


def test_conformance_host(image):
    report = run_conformance(HostPlugin, Config(host_num_devices=2), image=image)
    assert {"copies", "locks", "split copies", "queues", "kernel", "threads",
            "teardown"} <= set(report.passed)


def test_conformance_recording_double(image):
    run_conformance(RecordingPlugin, Config(host_num_devices=2), image=image)


def test_conformance_template(image, monkeypatch):
    monkeypatch.syspath_prepend(TEMPLATE)
    monkeypatch.setenv("OFFLOAD_TEMPLATE_NUM_DEVICES", "2")
    from offload_template_plugin import TemplatePlugin
    report = run_conformance(TemplatePlugin, image=image)
    assert report.devices == 2 and "kernel" in report.passed


def test_conformance_catches_a_wrong_copy():
    with pytest.raises(ConformanceError, match="_retrieve_impl.*returns the bytes sent"):
        run_conformance(ShortCopyPlugin)


def test_conformance_catches_a_foreign_exception():
    with pytest.raises(ConformanceError, match="not an OffloadError") as ei:
        run_conformance(ForeignErrorPlugin)
    assert ei.value.hook in ("_alloc_impl", "(many threads)", "data_alloc")


def test_installed_template_is_found_through_its_entry_point(tmp_path, image):
    """pip-installing the template makes its devices appear in offload-info and in
    omp_get_num_devices() with OFFLOAD_PLUGINS unset."""
    site = tmp_path / "site"
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--target", str(site), TEMPLATE], capture_output=True, text=True)
    if res.returncode:                 # no package index to fetch setuptools from? build
        res = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                              "--no-build-isolation", "--target", str(site), TEMPLATE],
                             capture_output=True, text=True)       # with what is here
    if res.returncode and ("setuptools" in res.stderr or "bdist_wheel" in res.stderr):
        pytest.skip("cannot build the template here: no package index, and no setuptools "
                    "with wheel support installed")
    assert res.returncode == 0, res.stderr[-3000:]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(site), ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]),
        OFFLOAD_TEMPLATE_NUM_DEVICES="2")
    env.pop("OFFLOAD_PLUGINS", None)
    info = subprocess.run([sys.executable, "-m", "offload.cli"], capture_output=True,
                          text=True, env=env)
    assert "plugin template: 2 device(s)" in info.stdout, info.stdout + info.stderr
    count = subprocess.run([sys.executable, "-c", "import offload; "
                            "print(offload.omp_get_num_devices())"],
                           capture_output=True, text=True, env=env)
    assert int(count.stdout) >= 3, count.stdout + count.stderr     # + the host device
    run = subprocess.run([sys.executable, "-c", f"""
import numpy as np, offload
k = offload.compile_c({SOURCE!r})
dev = next(d.number for d in offload.devices() if d.plugin == "template")
a = np.zeros(100, np.int32)
offload.target(k.add_one, a, 0, 100, map=[offload.tofrom(a)], device=dev)
print(int(a.sum()))
"""], capture_output=True, text=True, env=env)
    assert run.stdout.strip() == "100", run.stdout + run.stderr
