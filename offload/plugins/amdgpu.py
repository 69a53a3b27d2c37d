"""AMDGPU plugin: ROCr/HSA through cffi ABI mode on libhsa-runtime64.so.1.

Agents and ISAs, memory pools (coarse-grained device memory, fine-grained
host memory, the kernarg pool), hsa_amd_memory_lock pinning per agent, async
copies with completion signals, code objects checked against the agent's
target ID, kernarg layout from the NT_AMDGPU_METADATA note, AQL dispatch.
Semantics (counts, splits, path choice) stay in common.py.
"""
from __future__ import annotations

import io
import struct
import threading
from dataclasses import dataclass
from typing import Any, Optional

import cffi

from ..errors import ErrorCode, OffloadError
from ..image import Binary
from .common import AllocKind, GenericDevice, GenericPlugin, check_kernel_args, pack_scalar

CDEF = """
typedef int hsa_status_t;
typedef struct hsa_agent_s { uint64_t handle; } hsa_agent_t;
typedef struct hsa_signal_s { uint64_t handle; } hsa_signal_t;
typedef struct hsa_isa_s { uint64_t handle; } hsa_isa_t;
typedef struct hsa_amd_memory_pool_s { uint64_t handle; } hsa_amd_memory_pool_t;
typedef struct hsa_code_object_reader_s { uint64_t handle; } hsa_code_object_reader_t;
typedef struct hsa_executable_s { uint64_t handle; } hsa_executable_t;
typedef struct hsa_executable_symbol_s { uint64_t handle; } hsa_executable_symbol_t;
typedef struct hsa_loaded_code_object_s { uint64_t handle; } hsa_loaded_code_object_t;
typedef int64_t hsa_signal_value_t;

typedef struct hsa_queue_s {
  uint32_t type;
  uint32_t features;
  void *base_address;
  hsa_signal_t doorbell_signal;
  uint32_t size;
  uint32_t reserved1;
  uint64_t id;
} hsa_queue_t;

typedef struct hsa_kernel_dispatch_packet_s {
  uint16_t header;
  uint16_t setup;
  uint16_t workgroup_size_x;
  uint16_t workgroup_size_y;
  uint16_t workgroup_size_z;
  uint16_t reserved0;
  uint32_t grid_size_x;
  uint32_t grid_size_y;
  uint32_t grid_size_z;
  uint32_t private_segment_size;
  uint32_t group_segment_size;
  uint64_t kernel_object;
  void *kernarg_address;
  uint64_t reserved2;
  hsa_signal_t completion_signal;
} hsa_kernel_dispatch_packet_t;

typedef struct hsa_amd_pointer_info_s {
  uint32_t size;
  int type;
  void *agentBaseAddress;
  void *hostBaseAddress;
  size_t sizeInBytes;
  void *userData;
  hsa_agent_t agentOwner;
  uint32_t global_flags;
} hsa_amd_pointer_info_t;

hsa_status_t hsa_init(void);
hsa_status_t hsa_shut_down(void);
hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string);
hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void *data),
                                void *data);
hsa_status_t hsa_agent_get_info(hsa_agent_t agent, int attribute, void *value);
hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent,
                                    hsa_status_t (*callback)(hsa_isa_t isa, void *data),
                                    void *data);
hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, int attribute, void *value);
hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
    hsa_status_t (*callback)(hsa_amd_memory_pool_t memory_pool, void *data), void *data);
hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t memory_pool, int attribute,
                                          void *value);
hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t memory_pool, size_t size,
                                          uint32_t flags, void **ptr);
hsa_status_t hsa_amd_memory_pool_free(void *ptr);
hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents,
                                         const uint32_t *flags, const void *ptr);
hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                               const hsa_agent_t *consumers, hsa_signal_t *signal);
hsa_status_t hsa_signal_destroy(hsa_signal_t signal);
void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value);
hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal);
hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal, int condition,
                                             hsa_signal_value_t compare_value,
                                             uint64_t timeout_hint, int wait_state_hint);
hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src,
                                       hsa_agent_t src_agent, size_t size,
                                       uint32_t num_dep_signals,
                                       const hsa_signal_t *dep_signals,
                                       hsa_signal_t completion_signal);
hsa_status_t hsa_amd_memory_lock(void *host_ptr, size_t size, hsa_agent_t *agents,
                                 int num_agent, void **agent_ptr);
hsa_status_t hsa_amd_memory_unlock(void *host_ptr);
hsa_status_t hsa_amd_pointer_info(const void *ptr, hsa_amd_pointer_info_t *info,
                                  void *(*alloc)(size_t), uint32_t *num_agents_accessible,
                                  hsa_agent_t **accessible);
hsa_status_t hsa_code_object_reader_create_from_memory(const void *code_object, size_t size,
    hsa_code_object_reader_t *code_object_reader);
hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t code_object_reader);
hsa_status_t hsa_executable_create_alt(int profile, int default_float_rounding_mode,
                                       const char *options, hsa_executable_t *executable);
hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t executable,
    hsa_agent_t agent, hsa_code_object_reader_t code_object_reader, const char *options,
    hsa_loaded_code_object_t *loaded_code_object);
hsa_status_t hsa_executable_freeze(hsa_executable_t executable, const char *options);
hsa_status_t hsa_executable_destroy(hsa_executable_t executable);
hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable,
    const char *symbol_name, const hsa_agent_t *agent, hsa_executable_symbol_t *symbol);
hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t executable_symbol,
                                            int attribute, void *value);
hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, uint32_t type,
    void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data), void *data,
    uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t **queue);
hsa_status_t hsa_queue_destroy(hsa_queue_t *queue);
uint64_t hsa_queue_add_write_index_relaxed(const hsa_queue_t *queue, uint64_t value);
uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *queue);
"""

# enum values, given explicitly (checked against the HSA headers by tests/test_amdgpu.py)
HSA_STATUS_SUCCESS = 0x0
HSA_STATUS_INFO_BREAK = 0x1
HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001
HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008
HSA_AGENT_INFO_NAME = 0
HSA_AGENT_INFO_DEVICE = 17
HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT = 0xA002
HSA_AMD_AGENT_INFO_PRODUCT_NAME = 0xA009
HSA_DEVICE_TYPE_CPU = 0
HSA_DEVICE_TYPE_GPU = 1
HSA_ISA_INFO_NAME_LENGTH = 0
HSA_ISA_INFO_NAME = 1
HSA_AMD_SEGMENT_GLOBAL = 0
HSA_AMD_MEMORY_POOL_INFO_SEGMENT = 0
HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS = 1
HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED = 5
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT = 1
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED = 2
HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED = 4
HSA_EXT_POINTER_TYPE_UNKNOWN = 0
HSA_EXT_POINTER_TYPE_HSA = 1
HSA_EXT_POINTER_TYPE_LOCKED = 2
HSA_SIGNAL_CONDITION_LT = 2
HSA_WAIT_STATE_BLOCKED = 0
HSA_PROFILE_FULL = 1
HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT = 0
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT = 22
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE = 11
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE = 13
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE = 14
HSA_QUEUE_TYPE_MULTI = 0
HSA_PACKET_TYPE_KERNEL_DISPATCH = 2
HSA_PACKET_HEADER_TYPE = 0
HSA_PACKET_HEADER_BARRIER = 8
HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE = 9
HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE = 11
HSA_FENCE_SCOPE_SYSTEM = 2
HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS = 0

# ELF e_flags of AMDGPU code objects (amd_hsa_elf.h), code object v4 and later
EF_AMDGPU_MACH = 0x0FF
EF_AMDGPU_FEATURE_XNACK_V4 = 0x300
EF_AMDGPU_FEATURE_SRAMECC_V4 = 0xC00
FEATURE_SETTINGS = {"xnack": {0x000: "unsupported", 0x100: "any", 0x200: "off", 0x300: "on"},
                    "sramecc": {0x000: "unsupported", 0x400: "any", 0x800: "off",
                                0xC00: "on"}}
MACHINES = {  # EF_AMDGPU_MACH_AMDGCN_* -> processor
    0x020: "gfx600", 0x021: "gfx601", 0x022: "gfx700", 0x023: "gfx701", 0x024: "gfx702",
    0x025: "gfx703", 0x026: "gfx704", 0x028: "gfx801", 0x029: "gfx802", 0x02A: "gfx803",
    0x02B: "gfx810", 0x02C: "gfx900", 0x02D: "gfx902", 0x02E: "gfx904", 0x02F: "gfx906",
    0x030: "gfx908", 0x031: "gfx909", 0x032: "gfx90c", 0x033: "gfx1010", 0x034: "gfx1011",
    0x035: "gfx1012", 0x036: "gfx1030", 0x037: "gfx1031", 0x038: "gfx1032",
    0x039: "gfx1033", 0x03A: "gfx602", 0x03B: "gfx705", 0x03C: "gfx805", 0x03D: "gfx1035",
    0x03E: "gfx1034", 0x03F: "gfx90a", 0x040: "gfx940", 0x041: "gfx1100", 0x042: "gfx1013",
    0x043: "gfx1150", 0x044: "gfx1103", 0x045: "gfx1036", 0x046: "gfx1101",
    0x047: "gfx1102", 0x048: "gfx1200", 0x04A: "gfx1151", 0x04B: "gfx941", 0x04C: "gfx942",
    0x04E: "gfx1201", 0x055: "gfx1152",
}  # checked against ROCm 5.2.3's amd_hsa_elf.h and against clang-19's output (tests)
NT_AMDGPU_METADATA = 32

_ffi = cffi.FFI()
_ffi.cdef(CDEF)

_STATUS_CODES = {HSA_STATUS_ERROR_OUT_OF_RESOURCES: ErrorCode.OUT_OF_RESOURCES,
                 HSA_STATUS_ERROR_INVALID_ARGUMENT: ErrorCode.INVALID_ARGUMENT}


class _HSA:
    """libhsa-runtime64 with error checking: every status becomes an OffloadError
    carrying HSA's own status string."""

    def __init__(self, path: str):
        self.lib = _ffi.dlopen(path)

    def text(self, status: int) -> str:
        s = _ffi.new("const char **")
        if self.lib.hsa_status_string(status, s) == 0 and s[0] != _ffi.NULL:
            return _ffi.string(s[0]).decode()
        return f"HSA status 0x{status:x}"

    def check(self, status: int, what: str) -> None:
        if status != HSA_STATUS_SUCCESS:
            raise OffloadError(_STATUS_CODES.get(status, ErrorCode.BACKEND_FAILURE),
                               f"{what} failed: {self.text(status)}")


def _uint(ptr: Any) -> int:
    return int(_ffi.cast("uintptr_t", ptr))


def target_features(isa_name: str) -> tuple[str, dict[str, str]]:
    """('gfx90a', {'sramecc': 'on', 'xnack': 'off'}) from an ISA name or target ID."""
    tail = isa_name.rsplit("--", 1)[-1]
    proc, *feats = tail.split(":")
    settings = {}
    for f in feats:
        if f and f[-1] in "+-":
            settings[f[:-1]] = "on" if f[-1] == "+" else "off"
    return proc, settings


def code_object_target(flags: int) -> tuple[str, dict[str, str]]:
    """The processor and xnack/sramecc settings in an AMDGPU code object's e_flags."""
    proc = MACHINES.get(flags & EF_AMDGPU_MACH, f"unknown EF_AMDGPU_MACH 0x{flags & 0xFF:x}")
    return proc, {"xnack": FEATURE_SETTINGS["xnack"][flags & EF_AMDGPU_FEATURE_XNACK_V4],
                  "sramecc": FEATURE_SETTINGS["sramecc"][flags & EF_AMDGPU_FEATURE_SRAMECC_V4]}


def read_metadata(binary: Binary) -> dict:
    """The msgpack NT_AMDGPU_METADATA note of a code object, decoded."""
    import msgpack
    from elftools.elf.elffile import ELFFile
    elf = ELFFile(io.BytesIO(binary.data))
    for sec in elf.iter_sections():
        if sec["sh_type"] != "SHT_NOTE":
            continue
        data = sec.data()
        off = 0
        while off + 12 <= len(data):
            namesz, descsz, ntype = struct.unpack_from("<III", data, off)
            name = data[off + 12:off + 12 + namesz].rstrip(b"\0")
            desc_off = off + 12 + ((namesz + 3) & ~3)
            desc = data[desc_off:desc_off + descsz]
            off = desc_off + ((descsz + 3) & ~3)
            if name == b"AMDGPU" and ntype == NT_AMDGPU_METADATA:
                return msgpack.unpackb(desc, raw=False)
    raise OffloadError(ErrorCode.INVALID_BINARY,
                       "AMDGPU code object has no NT_AMDGPU_METADATA note")


@dataclass
class _Kernel:
    name: str
    kernel_object: int
    kernarg_size: int
    group_size: int
    private_size: int
    args: list              # metadata .args entries (explicit and hidden)


class _Queue:
    """A plugin queue: completion signals still to wait for, and what to free then."""

    def __init__(self) -> None:
        self.pending: list[Any] = []
        self.to_free: list[int] = []


class AMDGPUDevice(GenericDevice):
    plugin: "AMDGPUPlugin"

    def _init_impl(self) -> None:
        info = self.plugin.gpus[self.id]
        self.agent = info["agent"]
        self.isa = info["isa"]
        self.pool = info["pool"]
        self.processor, self.features = target_features(self.isa)
        hsa = self.plugin.hsa
        q = _ffi.new("hsa_queue_t **")
        hsa.check(hsa.lib.hsa_queue_create(self.agent, 4096, HSA_QUEUE_TYPE_MULTI, _ffi.NULL,
                                           _ffi.NULL, 0xFFFFFFFF, 0xFFFFFFFF, q),
                  "hsa_queue_create")
        self.hsa_queue = q[0]
        self._dispatch_lock = threading.Lock()
        self._kernels: dict[tuple[int, str], _Kernel] = {}

    def _deinit_impl(self) -> None:
        lib = self.plugin.hsa.lib
        for exe, reader, _ in self._loaded.values():
            lib.hsa_executable_destroy(exe)
            lib.hsa_code_object_reader_destroy(reader)
        lib.hsa_queue_destroy(self.hsa_queue)

    # ---- memory -----------------------------------------------------------
    def _alloc_impl(self, size: int, kind: AllocKind) -> int:
        hsa = self.plugin.hsa
        p = _ffi.new("void **")
        pool = self.pool if kind is AllocKind.DEVICE else self.plugin.host_pool
        hsa.check(hsa.lib.hsa_amd_memory_pool_allocate(pool, size, 0, p),
                  f"hsa_amd_memory_pool_allocate({size})")
        if kind is not AllocKind.DEVICE:
            agents = _ffi.new("hsa_agent_t[]", [self.agent])
            status = hsa.lib.hsa_amd_agents_allow_access(1, agents, _ffi.NULL, p[0])
            if status != HSA_STATUS_SUCCESS:
                hsa.lib.hsa_amd_memory_pool_free(p[0])
                hsa.check(status, "hsa_amd_agents_allow_access")
        return _uint(p[0])

    def _free_impl(self, addr: int, size: int, kind: AllocKind) -> None:
        self.plugin.hsa.check(self.plugin.hsa.lib.hsa_amd_memory_pool_free(
            _ffi.cast("void *", addr)), "hsa_amd_memory_pool_free")

    def _copy(self, dst: int, dst_agent: Any, src: int, src_agent: Any, size: int,
              queue: Optional[_Queue]) -> None:
        hsa = self.plugin.hsa
        sig = self.plugin.signal()
        # in queue order: the copy waits for what the queue still runs (a kernel)
        deps = list(queue.pending) if queue is not None else []
        dep_array = _ffi.new("hsa_signal_t[]", deps) if deps else _ffi.NULL
        status = hsa.lib.hsa_amd_memory_async_copy(
            _ffi.cast("void *", dst), dst_agent, _ffi.cast("void *", src), src_agent, size,
            len(deps), dep_array, sig)
        if status != HSA_STATUS_SUCCESS:
            hsa.lib.hsa_signal_destroy(sig)
            hsa.check(status, f"hsa_amd_memory_async_copy({size} bytes)")
        if queue is None:
            self.plugin.wait(sig)
        else:
            queue.pending.append(sig)

    def _submit_impl(self, tgt, host, size, queue, pinned) -> None:
        if pinned is None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "HSA copies need pinned host memory; unpinned data is staged")
        self._copy(tgt, self.agent, pinned, self._source_agent(host, pinned), size, queue)

    def _retrieve_impl(self, host, tgt, size, queue, pinned) -> None:
        if pinned is None:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               "HSA copies need pinned host memory; unpinned data is staged")
        self._copy(pinned, self._source_agent(host, pinned), tgt, self.agent, size, queue)

    def _source_agent(self, host: int, pinned: int) -> Any:
        """Locked memory is named by the GPU's agent address; pool memory by the CPU's."""
        return self.agent if pinned != host else self.plugin.cpu_agent

    def _exchange_impl(self, src, dst_device, dst, size, queue) -> bool:
        if not isinstance(dst_device, AMDGPUDevice):
            return False
        self._copy(dst, dst_device.agent, src, self.agent, size, queue)
        return True

    def _alloc_staging_impl(self, size: int) -> tuple[int, Any]:
        return self._alloc_impl(size, AllocKind.HOST), _Queue()

    def _free_staging_impl(self, addr: int, queue: Any) -> None:
        self._free_impl(addr, 0, AllocKind.HOST)

    # ---- queues -----------------------------------------------------------
    def _create_queue_impl(self) -> _Queue:
        return _Queue()

    def _sync_impl(self, queue: Optional[_Queue]) -> None:
        if queue is None:
            return
        while queue.pending:
            self.plugin.wait(queue.pending.pop(0))
        while queue.to_free:
            self._free_impl(queue.to_free.pop(), 0, AllocKind.HOST)

    def _query_impl(self, queue: _Queue) -> bool:
        lib = self.plugin.hsa.lib
        return all(lib.hsa_signal_load_scacquire(s) < 1 for s in queue.pending)

    # ---- kernels ----------------------------------------------------------
    def _load_impl(self, binary: Binary) -> Any:
        self.plugin.check_binary(binary, self)
        hsa = self.plugin.hsa
        reader = _ffi.new("hsa_code_object_reader_t *")
        buf = _ffi.from_buffer(binary.data)
        hsa.check(hsa.lib.hsa_code_object_reader_create_from_memory(buf, len(binary.data),
                                                                    reader),
                  "hsa_code_object_reader_create_from_memory")
        exe = _ffi.new("hsa_executable_t *")
        try:
            hsa.check(hsa.lib.hsa_executable_create_alt(
                HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, _ffi.NULL, exe),
                "hsa_executable_create_alt")
            hsa.check(hsa.lib.hsa_executable_load_agent_code_object(
                exe[0], self.agent, reader[0], _ffi.NULL, _ffi.NULL),
                "hsa_executable_load_agent_code_object")
            hsa.check(hsa.lib.hsa_executable_freeze(exe[0], _ffi.NULL), "hsa_executable_freeze")
        except OffloadError:
            hsa.lib.hsa_code_object_reader_destroy(reader[0])
            raise
        meta = read_metadata(binary)
        kernels = {k[".name"]: k for k in meta.get("amdhsa.kernels", [])}
        return exe[0], reader[0], kernels

    def kernel(self, program: Any, name: str) -> _Kernel:
        exe, _, meta = program
        key = (exe.handle, name)
        k = self._kernels.get(key)
        if k is not None:
            return k
        hsa = self.plugin.hsa
        sym = _ffi.new("hsa_executable_symbol_t *")
        agent = _ffi.new("hsa_agent_t *", self.agent)
        status = hsa.lib.hsa_executable_get_symbol_by_name(exe, f"{name}.kd".encode(), agent,
                                                          sym)
        if status != HSA_STATUS_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' ({name}.kd) not found: {hsa.text(status)}")
        values = {}
        for attr, ctype in ((HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, "uint64_t *"),
                            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, "uint32_t *"),
                            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, "uint32_t *"),
                            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                             "uint32_t *")):
            v = _ffi.new(ctype)
            hsa.check(hsa.lib.hsa_executable_symbol_get_info(sym[0], attr, v),
                      f"hsa_executable_symbol_get_info({attr})")
            values[attr] = v[0]
        md = meta.get(name)
        if md is None:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"kernel '{name}' has no entry in the code object's metadata")
        size = max(values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE],
                   md.get(".kernarg_segment_size", 0))
        k = _Kernel(name, values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT], size,
                    values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE],
                    values[HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE],
                    list(md.get(".args", [])))
        self._kernels[key] = k
        return k

    def _launch_impl(self, program, binary, name, args, teams, threads, queue) -> None:
        k = self.kernel(program, name)
        explicit = [a for a in k.args if not a[".value_kind"].startswith("hidden_")]
        check_kernel_args(name, len(explicit), len(args),
                          ", ".join(f"{a['.value_kind']}:{a['.size']}" for a in explicit))
        wg = int(threads or 64)
        groups = int(teams or 1)
        kernarg = bytearray(max(k.kernarg_size, 8))
        for meta, value in zip(explicit, args):
            _pack_arg(kernarg, meta, value, name)
        hidden = {"hidden_block_count_x": groups, "hidden_block_count_y": 1,
                  "hidden_block_count_z": 1, "hidden_group_size_x": wg,
                  "hidden_group_size_y": 1, "hidden_group_size_z": 1, "hidden_grid_dims": 1}
        for meta in k.args:
            if meta[".value_kind"] in hidden:
                _pack_arg(kernarg, meta, hidden[meta[".value_kind"]], name)
        self._dispatch(k, bytes(kernarg), groups, wg, queue)

    def _dispatch(self, k: _Kernel, kernarg: bytes, groups: int, wg: int,
                  queue: Optional[_Queue]) -> None:
        plugin, hsa = self.plugin, self.plugin.hsa
        if queue is not None:          # copies enqueued before the kernel must land first
            self._sync_impl(queue)
        buf = _ffi.new("void **")
        hsa.check(hsa.lib.hsa_amd_memory_pool_allocate(plugin.kernarg_pool, len(kernarg), 0,
                                                       buf), "kernarg allocation")
        _ffi.memmove(buf[0], kernarg, len(kernarg))
        done = plugin.signal()
        q = self.hsa_queue
        with self._dispatch_lock:
            index = hsa.lib.hsa_queue_add_write_index_relaxed(q, 1)
            while index - hsa.lib.hsa_queue_load_read_index_scacquire(q) >= q.size:
                pass                                              # ring full: wait
            pkt = _ffi.cast("hsa_kernel_dispatch_packet_t *", q.base_address) + index % q.size
            pkt.workgroup_size_x, pkt.workgroup_size_y, pkt.workgroup_size_z = wg, 1, 1
            pkt.grid_size_x, pkt.grid_size_y, pkt.grid_size_z = groups * wg, 1, 1
            pkt.private_segment_size = k.private_size
            pkt.group_segment_size = k.group_size
            pkt.kernel_object = k.kernel_object
            pkt.kernarg_address = buf[0]
            pkt.completion_signal = done
            header = ((HSA_PACKET_TYPE_KERNEL_DISPATCH << HSA_PACKET_HEADER_TYPE)
                      | (1 << HSA_PACKET_HEADER_BARRIER)
                      | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
                      | (HSA_FENCE_SCOPE_SYSTEM << HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE))
            setup = 1 << HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS
            # publish: header and setup in one aligned 32-bit store, after the body
            _ffi.cast("uint32_t *", pkt)[0] = header | (setup << 16)
            hsa.lib.hsa_signal_store_screlease(q.doorbell_signal, index)
        if queue is None:
            plugin.wait(done)
            hsa.lib.hsa_amd_memory_pool_free(buf[0])
        else:
            queue.pending.append(done)
            queue.to_free.append(_uint(buf[0]))

    def _is_accessible_impl(self, host: int, size: int) -> bool:
        return self.plugin._is_pinned_impl(host, size) is not None

    def _info_impl(self) -> dict:
        hsa = self.plugin.hsa
        name = _ffi.new("char[64]")
        hsa.check(hsa.lib.hsa_agent_get_info(self.agent, HSA_AMD_AGENT_INFO_PRODUCT_NAME, name),
                  "hsa_agent_get_info(PRODUCT_NAME)")
        cus = _ffi.new("uint32_t *")
        hsa.lib.hsa_agent_get_info(self.agent, HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT, cus)
        return {"name": _ffi.string(name).decode(), "kind": "gpu", "isa": self.isa,
                "processor": self.processor,
                "target features": ", ".join(f"{k}={v}" for k, v in sorted(self.features.items()))
                or "none", "compute units": cus[0]}


def _pack_arg(buf: bytearray, meta: dict, value: Any, kernel: str) -> None:
    off, size = meta[".offset"], meta[".size"]
    buf[off:off + size] = pack_scalar(value, size,
                                      f"kernel '{kernel}', {meta['.value_kind']} argument")


class AMDGPUPlugin(GenericPlugin):
    name = "amdgpu"
    priority = 20
    device_class = AMDGPUDevice
    asynchronous = True
    device_pool_bytes = 1 << 30     # reuse freed device memory (up to 1 GiB)
    staging_threshold = 1          # HSA copies only pinned memory: stage every unpinned piece
    staging_chunk = 8 << 20
    staging_lanes = 8

    def __init__(self, config):
        super().__init__(config)
        self.hsa: Optional[_HSA] = None
        self.gpus: list[dict] = []
        self._initialized = False

    # ---- discovery ----------------------------------------------------------
    def _init_impl(self) -> int:
        try:
            self.hsa = _HSA(self.config.hsa_library)
        except OSError as exc:
            raise OffloadError(ErrorCode.UNSUPPORTED,
                               f"{self.config.hsa_library} not loadable ({exc})") from None
        hsa = self.hsa
        hsa.check(hsa.lib.hsa_init(), "hsa_init")
        self._initialized = True
        agents: list[tuple[Any, int]] = []

        @_ffi.callback("hsa_status_t(hsa_agent_t, void *)")
        def each_agent(agent, _data):
            kind = _ffi.new("int *")
            if hsa.lib.hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, kind) == 0:
                agents.append((_ffi.new("hsa_agent_t *", agent)[0], kind[0]))
            return HSA_STATUS_SUCCESS

        hsa.check(hsa.lib.hsa_iterate_agents(each_agent, _ffi.NULL), "hsa_iterate_agents")
        cpus = [a for a, k in agents if k == HSA_DEVICE_TYPE_CPU]
        if not cpus:
            raise OffloadError(ErrorCode.NOT_FOUND, "HSA reports no CPU agent")
        self.cpu_agent = cpus[0]
        pools = self._pools(self.cpu_agent)
        self.host_pool = next((p for p, f in pools if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
                               and not f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT),
                              next((p for p, f in pools
                                    if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED), None))
        self.kernarg_pool = next((p for p, f in pools
                                  if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT),
                                 self.host_pool)
        if self.host_pool is None:
            raise OffloadError(ErrorCode.NOT_FOUND, "no fine-grained host memory pool")
        for agent, kind in agents:
            if kind != HSA_DEVICE_TYPE_GPU:
                continue
            pool = next((p for p, f in self._pools(agent)
                         if f & HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED), None)
            if pool is not None:
                self.gpus.append({"agent": agent, "isa": self._isa(agent), "pool": pool})
        if not self.gpus:
            self.reason = "HSA reports no GPU agent"
        return len(self.gpus)

    def _pools(self, agent: Any) -> list[tuple[Any, int]]:
        hsa = self.hsa
        found: list[tuple[Any, int]] = []

        @_ffi.callback("hsa_status_t(hsa_amd_memory_pool_t, void *)")
        def each_pool(pool, _data):
            seg, flags = _ffi.new("int *"), _ffi.new("uint32_t *")
            alloc = _ffi.new("bool *")
            hsa.lib.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, seg)
            hsa.lib.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                                                 flags)
            hsa.lib.hsa_amd_memory_pool_get_info(
                pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, alloc)
            if seg[0] == HSA_AMD_SEGMENT_GLOBAL and alloc[0]:
                found.append((_ffi.new("hsa_amd_memory_pool_t *", pool)[0], flags[0]))
            return HSA_STATUS_SUCCESS

        hsa.check(hsa.lib.hsa_amd_agent_iterate_memory_pools(agent, each_pool, _ffi.NULL),
                  "hsa_amd_agent_iterate_memory_pools")
        return found

    def _isa(self, agent: Any) -> str:
        hsa = self.hsa
        names: list[str] = []

        @_ffi.callback("hsa_status_t(hsa_isa_t, void *)")
        def each_isa(isa, _data):
            n = _ffi.new("uint32_t *")
            if hsa.lib.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, n) == 0:
                buf = _ffi.new("char[]", n[0] + 1)
                if hsa.lib.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, buf) == 0:
                    names.append(_ffi.string(buf).decode())
            return HSA_STATUS_SUCCESS

        hsa.check(hsa.lib.hsa_agent_iterate_isas(agent, each_isa, _ffi.NULL),
                  "hsa_agent_iterate_isas")
        return names[0] if names else "unknown"

    def _deinit_impl(self) -> None:
        if self._initialized:
            self.hsa.lib.hsa_shut_down()
            self._initialized = False

    # ---- signals ------------------------------------------------------------
    def signal(self) -> Any:
        s = _ffi.new("hsa_signal_t *")
        self.hsa.check(self.hsa.lib.hsa_signal_create(1, 0, _ffi.NULL, s), "hsa_signal_create")
        return s[0]

    def wait(self, sig: Any) -> None:
        """Wait for a completion signal (decremented to 0) and destroy it."""
        self.hsa.lib.hsa_signal_wait_scacquire(sig, HSA_SIGNAL_CONDITION_LT, 1,
                                               0xFFFFFFFFFFFFFFFF, HSA_WAIT_STATE_BLOCKED)
        self.hsa.lib.hsa_signal_destroy(sig)

    # ---- images -------------------------------------------------------------
    def check_binary(self, binary: Binary, dev: Optional[AMDGPUDevice] = None) -> None:
        """Raise INVALID_BINARY naming the mismatch unless `binary` fits dev's target ID."""
        if binary.format != "elf" or binary.elf.machine != "EM_AMDGPU":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"image is {binary.describe()}, not an AMDGPU code object")
        e = binary.elf
        if e.type != "ET_DYN":
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"AMDGPU code object must be ET_DYN (a linked shared object), "
                               f"not {e.type}")
        proc, feats = code_object_target(e.flags)
        if dev is None:
            return
        if proc != dev.processor:
            raise OffloadError(ErrorCode.INVALID_BINARY,
                               f"code object is for {proc}, device {dev.id} is "
                               f"{dev.processor} ({dev.isa})")
        for feat, setting in feats.items():
            want = dev.features.get(feat)
            if setting in ("on", "off") and want is not None and want != setting:
                raise OffloadError(ErrorCode.INVALID_BINARY,
                                   f"code object has {feat} {setting}, device {dev.id} runs "
                                   f"with {feat} {want} ({dev.isa})")

    # ---- pinning hooks: one hsa_amd_memory_lock per agent that uses an entry -----
    def _lock_impl(self, device: int, host: int, size: int, first: bool,
                   read_only: bool) -> int:
        dev = self.device(device)
        agents = _ffi.new("hsa_agent_t[]", [dev.agent])
        out = _ffi.new("void **")
        self.hsa.check(self.hsa.lib.hsa_amd_memory_lock(_ffi.cast("void *", host), size,
                                                        agents, 1, out),
                       f"hsa_amd_memory_lock(0x{host:x}, {size})")
        return _uint(out[0])

    def _unlock_impl(self, device: int, host: int, size: int, last: bool) -> None:
        self.hsa.check(self.hsa.lib.hsa_amd_memory_unlock(_ffi.cast("void *", host)),
                       f"hsa_amd_memory_unlock(0x{host:x})")

    def _is_pinned_impl(self, host: int, size: int) -> Optional[tuple[int, int, int]]:
        """Locked or HSA-allocated memory: (host base, size, agent base address)."""
        info = _ffi.new("hsa_amd_pointer_info_t *")
        info.size = _ffi.sizeof("hsa_amd_pointer_info_t")
        self.hsa.check(self.hsa.lib.hsa_amd_pointer_info(_ffi.cast("void *", host), info,
                                                         _ffi.NULL, _ffi.NULL, _ffi.NULL),
                       "hsa_amd_pointer_info")
        if info.type not in (HSA_EXT_POINTER_TYPE_LOCKED, HSA_EXT_POINTER_TYPE_HSA):
            return None
        base = _uint(info.hostBaseAddress)
        if not (base <= host and host + size <= base + info.sizeInBytes):
            return None
        return base, int(info.sizeInBytes), _uint(info.agentBaseAddress)
