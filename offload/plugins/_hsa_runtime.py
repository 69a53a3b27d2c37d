"""Bindings to ROCr (libhsa-runtime64.so.1) through cffi ABI mode: declarations,
enum values, and the error check. No policy here; the hooks are in amdgpu.py."""
from __future__ import annotations

from typing import Any

from ..errors import ErrorCode, OffloadError
from ..ffi_cache import ffi_for

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

typedef struct hsa_barrier_and_packet_s {
  uint16_t header;
  uint16_t reserved0;
  uint32_t reserved1;
  hsa_signal_t dep_signal[5];
  uint64_t reserved2;
  hsa_signal_t completion_signal;
} hsa_barrier_and_packet_t;

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
hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent,
    hsa_amd_memory_pool_t memory_pool, int attribute, void *value);
hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t memory_pool, size_t size,
                                          uint32_t flags, void **ptr);
hsa_status_t hsa_amd_memory_pool_free(void *ptr);
hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents,
                                         const uint32_t *flags, const void *ptr);
hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                               const hsa_agent_t *consumers, hsa_signal_t *signal);
hsa_status_t hsa_signal_destroy(hsa_signal_t signal);
void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value);
void hsa_signal_store_relaxed(hsa_signal_t signal, hsa_signal_value_t value);
hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal);
hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal, int condition,
                                             hsa_signal_value_t compare_value,
                                             uint64_t timeout_hint, int wait_state_hint);
hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src,
                                       hsa_agent_t src_agent, size_t size,
                                       uint32_t num_dep_signals,
                                       const hsa_signal_t *dep_signals,
                                       hsa_signal_t completion_signal);
typedef struct hsa_pitched_ptr_s { void *base; size_t pitch; size_t slice; } hsa_pitched_ptr_t;
typedef struct hsa_dim3_s { uint32_t x; uint32_t y; uint32_t z; } hsa_dim3_t;
hsa_status_t hsa_amd_memory_async_copy_rect(const hsa_pitched_ptr_t *dst,
                                            const hsa_dim3_t *dst_offset,
                                            const hsa_pitched_ptr_t *src,
                                            const hsa_dim3_t *src_offset,
                                            const hsa_dim3_t *range, hsa_agent_t copy_agent,
                                            int dir, uint32_t num_dep_signals,
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
hsa_status_t hsa_executable_validate(hsa_executable_t executable, uint32_t *result);
hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable,
    const char *symbol_name, const hsa_agent_t *agent, hsa_executable_symbol_t *symbol);
hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t executable_symbol,
                                            int attribute, void *value);
hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, uint32_t type,
    void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data), void *data,
    uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t **queue);
hsa_status_t hsa_queue_destroy(hsa_queue_t *queue);
typedef struct { uint64_t start; uint64_t end; } hsa_amd_profiling_dispatch_time_t;
hsa_status_t hsa_amd_profiling_set_profiler_enabled(hsa_queue_t *queue, int enable);
hsa_status_t hsa_amd_profiling_get_dispatch_time(hsa_agent_t agent, hsa_signal_t signal,
                                                 hsa_amd_profiling_dispatch_time_t *time);
hsa_status_t hsa_system_get_info(int attribute, void *value);
uint64_t hsa_queue_add_write_index_relaxed(const hsa_queue_t *queue, uint64_t value);
uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *queue);
"""

# enum values, given explicitly (checked against the HSA headers by
# tests/plugins/amdgpu/test_amdgpu.py)
HSA_STATUS_SUCCESS = 0x0
HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY = 3                 # hsa_system_info_t
HSA_STATUS_INFO_BREAK = 0x1
HSA_STATUS_ERROR_INVALID_ARGUMENT = 0x1001
hsaHostToDevice, hsaDeviceToHost = 1, 2              # hsa_amd_copy_direction_t
HSA_STATUS_ERROR_OUT_OF_RESOURCES = 0x1008
HSA_STATUS_ERROR_INVALID_PACKET_FORMAT = 0x1009
HSA_STATUS_ERROR_INCOMPATIBLE_ARGUMENTS = 0x100D
HSA_STATUS_ERROR_EXCEPTION = 0x1016
HSA_AGENT_INFO_FEATURE = 2
HSA_AGENT_INFO_WORKGROUP_MAX_SIZE = 8
HSA_AGENT_INFO_GRID_MAX_SIZE = 10
HSA_AGENT_FEATURE_KERNEL_DISPATCH = 1
HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS = 0
HSA_AMD_MEMORY_POOL_ACCESS_NEVER_ALLOWED = 0
HSA_EXECUTABLE_SYMBOL_INFO_TYPE = 0
HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK = 15
HSA_SYMBOL_KIND_KERNEL = 1
HSA_PACKET_TYPE_BARRIER_AND = 3
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
HSA_PACKET_TYPE_INVALID = 1
HSA_PACKET_TYPE_KERNEL_DISPATCH = 2
HSA_PACKET_HEADER_TYPE = 0
HSA_PACKET_HEADER_BARRIER = 8
HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE = 9
HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE = 11
HSA_FENCE_SCOPE_SYSTEM = 2
HSA_KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS = 0


ffi = ffi_for("hsa", CDEF)     # parsed once per machine (ffi_cache)

_STATUS_CODES = {HSA_STATUS_ERROR_OUT_OF_RESOURCES: ErrorCode.OUT_OF_RESOURCES,
                 HSA_STATUS_ERROR_INVALID_ARGUMENT: ErrorCode.INVALID_ARGUMENT}


class HSA:
    """libhsa-runtime64 with error checking: every status becomes an OffloadError
    carrying HSA's own status string."""

    def __init__(self, path: str):
        self.lib = ffi.dlopen(path)

    def text(self, status: int) -> str:
        s = ffi.new("const char **")
        if self.lib.hsa_status_string(status, s) == 0 and s[0] != ffi.NULL:
            return ffi.string(s[0]).decode()
        return f"HSA status 0x{status:x}"

    def check(self, status: int, what: str) -> None:
        if status != HSA_STATUS_SUCCESS:
            raise OffloadError(_STATUS_CODES.get(status, ErrorCode.BACKEND_FAILURE),
                               f"{what} failed: {self.text(status)}")

    def agent_u32(self, agent: Any, attribute: int, default: int) -> int:
        """A 32-bit agent attribute, or `default` when the runtime does not know it."""
        v = ffi.new("uint32_t *")
        return v[0] if self.lib.hsa_agent_get_info(agent, attribute, v) == 0 else default

    def pool_access(self, agent: Any, pool: Any) -> int:
        """HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS of `pool` for `agent`."""
        v = ffi.new("int *")
        self.check(self.lib.hsa_amd_agent_memory_pool_get_info(
            agent, pool, HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS, v),
            "hsa_amd_agent_memory_pool_get_info(ACCESS)")
        return int(v[0])

    def allow_access(self, agents: list[Any], address: int) -> None:
        """hsa_amd_agents_allow_access for `agents` on the allocation at `address`."""
        if not agents:
            return
        arr = ffi.new("hsa_agent_t[]", agents)
        self.check(self.lib.hsa_amd_agents_allow_access(len(agents), arr, ffi.NULL,
                                                        ffi.cast("void *", address)),
                   "hsa_amd_agents_allow_access")

    def symbol_info(self, sym: Any, attribute: int, ctype: str) -> Any:
        v = ffi.new(ctype)
        self.check(self.lib.hsa_executable_symbol_get_info(sym, attribute, v),
                   f"hsa_executable_symbol_get_info({attribute})")
        return v[0]

    def load_executable(self, agent: Any, data: bytes) -> Any:
        """A frozen, validated executable of code object `data` for `agent` (the reader
        is destroyed after freeze, as LLVM does; nothing leaks when a step fails)."""
        reader = ffi.new("hsa_code_object_reader_t *")
        buf = ffi.from_buffer(data)                    # ROCr borrows it until freeze
        self.check(self.lib.hsa_code_object_reader_create_from_memory(buf, len(data), reader),
                   "hsa_code_object_reader_create_from_memory")
        exe = ffi.new("hsa_executable_t *")
        made = False
        try:
            self.check(self.lib.hsa_executable_create_alt(
                HSA_PROFILE_FULL, HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT, ffi.NULL, exe),
                "hsa_executable_create_alt")
            made = True
            self.check(self.lib.hsa_executable_load_agent_code_object(
                exe[0], agent, reader[0], ffi.NULL, ffi.NULL),
                "hsa_executable_load_agent_code_object")
            self.check(self.lib.hsa_executable_freeze(exe[0], ffi.NULL), "hsa_executable_freeze")
            result = ffi.new("uint32_t *")
            self.check(self.lib.hsa_executable_validate(exe[0], result),
                       "hsa_executable_validate")
            if result[0]:
                raise OffloadError(ErrorCode.INVALID_BINARY,
                                   f"hsa_executable_validate found the code object invalid "
                                   f"({result[0]:#x})")
        except BaseException:
            if made:
                self.lib.hsa_executable_destroy(exe[0])
            raise
        finally:
            self.lib.hsa_code_object_reader_destroy(reader[0])
        return exe[0]

    def kernel_symbol(self, exe: Any, agent: Any, name: str) -> dict[int, Any]:
        """The symbol `name`.kd's type, kernel object, segment sizes and dynamic-stack
        flag (NOT_FOUND when absent)."""
        sym = ffi.new("hsa_executable_symbol_t *")
        agent_p = ffi.new("hsa_agent_t *", agent)
        status = self.lib.hsa_executable_get_symbol_by_name(exe, f"{name}.kd".encode(),
                                                           agent_p, sym)
        if status != HSA_STATUS_SUCCESS:
            raise OffloadError(ErrorCode.NOT_FOUND,
                               f"kernel '{name}' ({name}.kd) not found: {self.text(status)}")
        return {attr: self.symbol_info(sym[0], attr, ctype) for attr, ctype in (
            (HSA_EXECUTABLE_SYMBOL_INFO_TYPE, "uint32_t *"),
            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT, "uint64_t *"),
            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE, "uint32_t *"),
            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE, "uint32_t *"),
            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE, "uint32_t *"),
            (HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK, "bool *"))}

    def agents(self) -> list[tuple[Any, int]]:
        """Every agent with its device type (HSA_DEVICE_TYPE_CPU / _GPU)."""
        hsa = self
        agents: list[tuple[Any, int]] = []

        @ffi.callback("hsa_status_t(hsa_agent_t, void *)")
        def each_agent(agent, _data):
            kind = ffi.new("int *")
            if hsa.lib.hsa_agent_get_info(agent, HSA_AGENT_INFO_DEVICE, kind) == 0:
                agents.append((ffi.new("hsa_agent_t *", agent)[0], kind[0]))
            return HSA_STATUS_SUCCESS

        hsa.check(hsa.lib.hsa_iterate_agents(each_agent, ffi.NULL), "hsa_iterate_agents")
        return agents

    def pools(self, agent: Any) -> list[tuple[Any, int]]:
        """The agent's global-segment pools the runtime may allocate from, with flags."""
        hsa = self
        found: list[tuple[Any, int]] = []

        @ffi.callback("hsa_status_t(hsa_amd_memory_pool_t, void *)")
        def each_pool(pool, _data):
            seg, flags = ffi.new("int *"), ffi.new("uint32_t *")
            alloc = ffi.new("bool *")
            hsa.lib.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_SEGMENT, seg)
            hsa.lib.hsa_amd_memory_pool_get_info(pool, HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
                                                 flags)
            hsa.lib.hsa_amd_memory_pool_get_info(
                pool, HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED, alloc)
            if seg[0] == HSA_AMD_SEGMENT_GLOBAL and alloc[0]:
                found.append((ffi.new("hsa_amd_memory_pool_t *", pool)[0], flags[0]))
            return HSA_STATUS_SUCCESS

        hsa.check(hsa.lib.hsa_amd_agent_iterate_memory_pools(agent, each_pool, ffi.NULL),
                  "hsa_amd_agent_iterate_memory_pools")
        return found

    def isa_name(self, agent: Any) -> str:
        """The name of the agent's first ISA (e.g. amdgcn-amd-amdhsa--gfx90a:xnack-)."""
        hsa = self
        names: list[str] = []

        @ffi.callback("hsa_status_t(hsa_isa_t, void *)")
        def each_isa(isa, _data):
            n = ffi.new("uint32_t *")
            if hsa.lib.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME_LENGTH, n) == 0:
                buf = ffi.new("char[]", n[0] + 1)
                if hsa.lib.hsa_isa_get_info_alt(isa, HSA_ISA_INFO_NAME, buf) == 0:
                    names.append(ffi.string(buf).decode())
            return HSA_STATUS_SUCCESS

        hsa.check(hsa.lib.hsa_agent_iterate_isas(agent, each_isa, ffi.NULL),
                  "hsa_agent_iterate_isas")
        return names[0] if names else "unknown"


def uint(ptr: Any) -> int:
    return int(ffi.cast("uintptr_t", ptr))
