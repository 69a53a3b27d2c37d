"""LLVM 19's libomptarget C ABI as offload exports it: the structures clang-19 emits
(LLVM 19: offload/include/Shared/APITypes.h, omptarget.h) and the 71 `VERS1.0` functions, plus
`__tgt_get_num_devices` and `tgt_pause_resource` for libomp's device queries."""
from __future__ import annotations

SONAME = "libomptarget.so.19.1"
VERSION_NODE = "VERS1.0"

#: libomp's functions the library calls when libomp is loaded (offload/capi/devices.py)
LIBOMP = ("int omp_get_default_device(void);"
          "void __kmpc_omp_wait_deps(void *loc, int32_t gtid, int32_t ndeps, void *deps, "
          "int32_t ndeps_noalias, void *noalias_deps);"
          "int32_t __kmpc_global_thread_num(void *loc);")

# the structures, read through cffi casts of the pointers the exports receive
TYPES = """
typedef struct { int32_t reserved_1; int32_t flags; int32_t reserved_2; int32_t reserved_3;
                 char *psource; } ident_t;
typedef struct { void *addr; char *name; size_t size; int32_t flags; int32_t data; }
    __tgt_offload_entry;
typedef struct { void *ImageStart; void *ImageEnd; __tgt_offload_entry *EntriesBegin;
                 __tgt_offload_entry *EntriesEnd; } __tgt_device_image;
typedef struct { int32_t NumDeviceImages; __tgt_device_image *DeviceImages;
                 __tgt_offload_entry *HostEntriesBegin; __tgt_offload_entry *HostEntriesEnd; }
    __tgt_bin_desc;
typedef struct { uint32_t Version; uint32_t NumArgs; void **ArgBasePtrs; void **ArgPtrs;
                 int64_t *ArgSizes; int64_t *ArgTypes; void **ArgNames; void **ArgMappers;
                 uint64_t Tripcount; uint64_t Flags; uint32_t NumTeams[3];
                 uint32_t ThreadLimit[3]; uint32_t DynCGroupMem; } KernelArgsTy;
typedef struct { uint64_t Offset; uint64_t Count; uint64_t Stride; } __tgt_target_non_contig;
typedef struct { intptr_t base_addr; size_t len; uint8_t flags; } kmp_depend_info_t;
"""

_DATA = "int64_t dev, int32_t n, void **bases, void **begins, int64_t *sizes, int64_t *types"
_DEPS = "int32_t dep_num, void *dep_list, int32_t noalias_num, void *noalias_list"
_MAPPER = ("void *loc, int64_t dev, int32_t n, void **bases, void **begins, int64_t *sizes, "
           "int64_t *types, void **names, void **mappers")
_TGT = ("int64_t dev, void *host_ptr, int32_t n, void **bases, void **begins, int64_t *sizes, "
        "int64_t *types")
_TGT_MAPPER = ("void *loc, int64_t dev, void *host_ptr, int32_t n, void **bases, void **begins, "
               "int64_t *sizes, int64_t *types, void **names, void **mappers")

# name -> C declaration; LLVM 19's signatures with struct pointers as void *
EXPORTS: dict[str, str] = {}


def _add(decl: str) -> None:
    name = decl.split("(")[0].split()[-1].lstrip("*")
    EXPORTS[name] = decl + ";"


for _d in (
    # registration
    "void __tgt_register_lib(void *desc)", "void __tgt_unregister_lib(void *desc)",
    "void __tgt_register_requires(int64_t flags)", "void __tgt_init_all_rtls(void)",
    "void __tgt_rtl_init(void)", "void __tgt_rtl_deinit(void)",
    # kernels
    "int __tgt_target_kernel(void *loc, int64_t dev, int32_t num_teams, int32_t thread_limit, "
    "void *host_ptr, void *args)",
    "int __tgt_target_kernel_nowait(void *loc, int64_t dev, int32_t num_teams, "
    f"int32_t thread_limit, void *host_ptr, void *args, {_DEPS})",
    "int __tgt_target_kernel_replay(void *loc, int64_t dev, void *host_ptr, void *device_memory, "
    "int64_t device_memory_size, void **tgt_args, ptrdiff_t *tgt_offsets, int32_t num_args, "
    "int32_t num_teams, int32_t thread_limit, uint64_t loop_tripcount)",
    f"int __tgt_target({_TGT})", f"int __tgt_target_nowait({_TGT}, {_DEPS})",
    f"int __tgt_target_mapper({_TGT_MAPPER})",
    f"int __tgt_target_nowait_mapper({_TGT_MAPPER}, {_DEPS})",
    f"int __tgt_target_teams({_TGT}, int32_t num_teams, int32_t thread_limit)",
    f"int __tgt_target_teams_nowait({_TGT}, int32_t num_teams, int32_t thread_limit, {_DEPS})",
    f"int __tgt_target_teams_mapper({_TGT_MAPPER}, int32_t num_teams, int32_t thread_limit)",
    f"int __tgt_target_teams_nowait_mapper({_TGT_MAPPER}, int32_t num_teams, "
    f"int32_t thread_limit, {_DEPS})",
    "void __kmpc_push_target_tripcount(int64_t dev, uint64_t tripcount)",
    "void __kmpc_push_target_tripcount_mapper(void *loc, int64_t dev, uint64_t tripcount)",
    # data
    *[f"void __tgt_target_data_{k}({_DATA})" for k in ("begin", "end", "update")],
    *[f"void __tgt_target_data_{k}_nowait({_DATA}, {_DEPS})" for k in ("begin", "end", "update")],
    *[f"void __tgt_target_data_{k}_mapper({_MAPPER})" for k in ("begin", "end", "update")],
    *[f"void __tgt_target_data_{k}_nowait_mapper({_MAPPER}, {_DEPS})"
      for k in ("begin", "end", "update")],
    # mappers, async
    "int64_t __tgt_mapper_num_components(void *handle)",
    "void __tgt_push_mapper_component(void *handle, void *base, void *begin, int64_t size, "
    "int64_t type, void *name)",
    "void __tgt_target_nowait_query(void **async_handle)",
    # the OpenMP device API
    "int omp_get_num_devices(void)", "int omp_get_device_num(void)",
    "int omp_get_initial_device(void)",
    "void *omp_get_mapped_ptr(const void *ptr, int device_num)",
    "void *omp_target_alloc(size_t size, int device_num)",
    "void omp_target_free(void *ptr, int device_num)",
    "int omp_target_is_present(const void *ptr, int device_num)",
    "int omp_target_memcpy(void *dst, const void *src, size_t length, size_t dst_offset, "
    "size_t src_offset, int dst_device, int src_device)",
    "int omp_target_memcpy_rect(void *dst, const void *src, size_t element_size, int num_dims, "
    "const size_t *volume, const size_t *dst_offsets, const size_t *src_offsets, "
    "const size_t *dst_dimensions, const size_t *src_dimensions, int dst_device, "
    "int src_device)",
    "int omp_target_memcpy_async(void *dst, const void *src, size_t length, size_t dst_offset, "
    "size_t src_offset, int dst_device, int src_device, int depobj_count, void *depobj_list)",
    "int omp_target_memcpy_rect_async(void *dst, const void *src, size_t element_size, "
    "int num_dims, const size_t *volume, const size_t *dst_offsets, const size_t *src_offsets, "
    "const size_t *dst_dimensions, const size_t *src_dimensions, int dst_device, "
    "int src_device, int depobj_count, void *depobj_list)",
    "void *omp_target_memset(void *ptr, int value, size_t count, int device_num)",
    "void *omp_target_memset_async(void *ptr, int value, size_t count, int device_num, "
    "int depobj_count, void *depobj_list)",
    "int omp_target_associate_ptr(const void *host_ptr, const void *device_ptr, size_t size, "
    "size_t device_offset, int device_num)",
    "int omp_target_disassociate_ptr(const void *host_ptr, int device_num)",
    "intptr_t omp_get_interop_int(void *interop, int property, int *ret_code)",
    "void *omp_get_interop_ptr(void *interop, int property, int *ret_code)",
    "const char *omp_get_interop_str(void *interop, int property, int *ret_code)",
    "const char *omp_get_interop_name(void *interop, int property)",
    "const char *omp_get_interop_type_desc(void *interop, int property)",
    # LLVM's extensions
    *[f"void *llvm_omp_target_alloc_{k}(size_t size, int device_num)"
      for k in ("device", "host", "shared")],
    *[f"void llvm_omp_target_free_{k}(void *ptr, int device_num)"
      for k in ("device", "host", "shared")],
    "void *llvm_omp_target_dynamic_shared_alloc(void)",
    "void *llvm_omp_target_lock_mem(void *ptr, size_t size, int device_num)",
    "void llvm_omp_target_unlock_mem(void *ptr, int device_num)",
    "void ompx_dump_mapping_tables(void)",
    # interop objects, misc
    "void __tgt_interop_init(void *loc, int32_t gtid, void **interop, int32_t interop_type, "
    "int32_t device_id, int32_t ndeps, void *dep_list, int32_t have_nowait)",
    "void __tgt_interop_use(void *loc, int32_t gtid, void **interop, int32_t device_id, "
    "int32_t ndeps, void *dep_list, int32_t have_nowait)",
    "void __tgt_interop_destroy(void *loc, int32_t gtid, void **interop, int32_t device_id, "
    "int32_t ndeps, void *dep_list, int32_t have_nowait)",
    "void __tgt_set_info_flag(uint32_t flags)", "int __tgt_print_device_info(int64_t dev)",
    "int __tgt_activate_record_replay(int64_t dev, uint64_t memory_size, void *vaddr, "
    "_Bool is_record, _Bool save_output, uint64_t *req_ptr_arg_offset)",
    "void ompt_libomptarget_connect(void *result)",
    # not in LLVM 19: what libomp looks for first (see the ABI notes, section 2)
    "int __tgt_get_num_devices(void)", "int tgt_pause_resource(int kind, int device_num)",
):
    _add(_d)

LLVM_EXPORTS = [n for n in EXPORTS if n not in ("__tgt_get_num_devices", "tgt_pause_resource")]
assert len(LLVM_EXPORTS) == 71, len(LLVM_EXPORTS)

#: the data constructs' exports: (export name, construct kind), numbered as DATA_ONE's
#: `export` numbers them
DATA_EXPORTS = tuple((f"__tgt_target_data_{k}{v}", k) for k in ("begin", "end", "update")
                     for v in ("", "_nowait", "_mapper", "_nowait_mapper"))
#: what the data constructs' C bodies call first for a list of one component without a
#: mapper, its fields read in C: 1 when the construct is done (or has failed and been
#: reported), 0 when the list takes the general path (not an export of the library)
DATA_ONE = ("int data_one(void *loc, int32_t export, int64_t dev, uintptr_t base, "
            "uintptr_t begin, int64_t size, uint64_t type);")
#: the region exports whose C bodies call KERNEL_ONE or KERNEL_MANY first, numbered as
#: their `export`
KERNEL_EXPORTS = ("__tgt_target_kernel", "__tgt_target_kernel_nowait")
#: what a region's C body calls first for a map list of at most one component without a
#: mapper, read in C (n: 0 or 1): OFFLOAD_SUCCESS / OFFLOAD_FAIL when the region ran (or
#: failed, reported), KERNEL_GENERAL when it takes the general path
KERNEL_ONE = ("int kernel_one(void *loc, int32_t export, int64_t dev, int32_t num_teams, "
              "int32_t thread_limit, uintptr_t host_ptr, uint64_t tripcount, int32_t n, "
              "uintptr_t base, uintptr_t begin, int64_t size, uint64_t type);")
#: and for any other list, the map arrays by address; the same results
KERNEL_MANY = ("int kernel_many(void *loc, int32_t export, int64_t dev, int32_t num_teams, "
               "int32_t thread_limit, uintptr_t host_ptr, uint64_t tripcount, int32_t n, "
               "uintptr_t bases, uintptr_t begins, uintptr_t sizes, uintptr_t types, "
               "uintptr_t mappers);")
KERNEL_GENERAL = 1
#: the runtime's first steps the exports' C bodies call (not exports of the library):
#: name -> (declaration, the exports that call it, by the number they pass)
FIRST_STEPS = {"data_one": (DATA_ONE, tuple(name for name, _ in DATA_EXPORTS)),
               "kernel_one": (KERNEL_ONE, KERNEL_EXPORTS),
               "kernel_many": (KERNEL_MANY, KERNEL_EXPORTS)}

# map-type bits beyond offload.clauses.MapType
MEMBER_OF_MASK = 0xFFFF000000000000
NON_CONTIG = 0x100000000000
# entry flags
ENTRY_LINK, ENTRY_INDIRECT, ENTRY_REQUIRES = 0x1, 0x8, 0x10
