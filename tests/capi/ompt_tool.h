/* An OMPT tool (as LLVM's offload/test/ompt/callbacks.h and register_*.h) that prints
   libomptarget's target, data-op, submit and device callbacks with names that do not
   depend on the run: host memory by the ranges the program names (tool_name), device
   memory by the order its allocation was reported (D0, D1, ...), return addresses by the
   order they were first seen (site0, ...); the non-EMI ids by their relation to the ones
   before (new, the open region's, 0). Registers the EMI callbacks when TOOL_EMI is 1, else
   the non-EMI ones. Shared by tests/capi/ompt_*.c. */
#include <omp-tools.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifndef TOOL_EMI
#define TOOL_EMI 1
#endif

static struct { const char *name; const char *base; size_t size; } tool_hosts[32];
static int tool_nhosts;
static struct { const char *base; size_t size; } tool_devs[256];
static int tool_ndevs;
static const void *tool_sites[256];
static int tool_nsites;
static uint64_t tool_next_id = 1;

static void tool_name(const char *name, const void *base, size_t size) {
  tool_hosts[tool_nhosts].name = name;
  tool_hosts[tool_nhosts].base = (const char *)base;
  tool_hosts[tool_nhosts++].size = size;
}

static const char *tool_addr(const void *p, char *buf) {
  const char *c = (const char *)p;
  if (!p) return "null";
  for (int i = 0; i < tool_nhosts; ++i)
    if (c >= tool_hosts[i].base && c < tool_hosts[i].base + tool_hosts[i].size + 1) {
      snprintf(buf, 64, "%s+%ld", tool_hosts[i].name, (long)(c - tool_hosts[i].base));
      return buf;
    }
  for (int i = tool_ndevs - 1; i >= 0; --i)
    if (c >= tool_devs[i].base && c < tool_devs[i].base + tool_devs[i].size + 1) {
      snprintf(buf, 64, "D%d+%ld", i, (long)(c - tool_devs[i].base));
      return buf;
    }
  return "other";
}

static int tool_site(const void *p) {
  if (!p) return -1;
  for (int i = 0; i < tool_nsites; ++i)
    if (tool_sites[i] == p) return i;
  tool_sites[tool_nsites] = p;
  return tool_nsites++;
}

static const char *tool_endpoint(ompt_scope_endpoint_t e) {
  return e == ompt_scope_begin ? "begin" : e == ompt_scope_end ? "end" : "?";
}

static const char *tool_kind(ompt_target_t k) {
  switch (k) {
  case ompt_target: return "target";
  case ompt_target_enter_data: return "enter_data";
  case ompt_target_exit_data: return "exit_data";
  case ompt_target_update: return "update";
  default: return "other";
  }
}

static const char *tool_op(ompt_target_data_op_t op) {
  switch (op) {
  case ompt_target_data_alloc: return "alloc";
  case ompt_target_data_transfer_to_device: return "to_device";
  case ompt_target_data_transfer_from_device: return "from_device";
  case ompt_target_data_delete: return "delete";
  case ompt_target_data_associate: return "associate";
  case ompt_target_data_disassociate: return "disassociate";
  default: return "other";
  }
}

static void on_target_emi(ompt_target_t kind, ompt_scope_endpoint_t endpoint, int device_num,
                          ompt_data_t *task_data, ompt_data_t *target_task_data,
                          ompt_data_t *target_data, const void *codeptr_ra) {
  if (endpoint == ompt_scope_begin) target_data->value = tool_next_id++;
  printf("target_emi %s %s dev=%d task=%d target_task=%d id=%lu site%d\n", tool_kind(kind),
         tool_endpoint(endpoint), device_num, task_data != NULL, target_task_data != NULL,
         target_data->value, tool_site(codeptr_ra));
}

static void on_data_op_emi(ompt_scope_endpoint_t endpoint, ompt_data_t *target_task_data,
                           ompt_data_t *target_data, ompt_id_t *host_op_id,
                           ompt_target_data_op_t optype, void *src, int src_dev, void *dst,
                           int dst_dev, size_t bytes, const void *codeptr_ra) {
  char b1[64], b2[64];
  if (endpoint == ompt_scope_begin) *host_op_id = tool_next_id++;
  if (optype == ompt_target_data_alloc && endpoint == ompt_scope_end && dst) {
    tool_devs[tool_ndevs].base = dst;
    tool_devs[tool_ndevs++].size = bytes;
  }
  printf("data_op_emi %s %s target=%lu op=%lu src=%s/%d dst=%s/%d bytes=%zu site%d\n",
         tool_endpoint(endpoint), tool_op(optype), target_data ? target_data->value : 0,
         *host_op_id, tool_addr(src, b1), src_dev, tool_addr(dst, b2), dst_dev, bytes,
         tool_site(codeptr_ra));
}

static void on_submit_emi(ompt_scope_endpoint_t endpoint, ompt_data_t *target_data,
                          ompt_id_t *host_op_id, unsigned int requested_num_teams) {
  if (endpoint == ompt_scope_begin) *host_op_id = tool_next_id++;
  printf("submit_emi %s target=%lu op=%lu teams=%u\n", tool_endpoint(endpoint),
         target_data->value, *host_op_id, requested_num_teams);
}

static uint64_t tool_last_id, tool_open_target;
static const char *tool_id(uint64_t id) {        /* a non-EMI id against those before */
  if (!id) return "0";
  if (id == tool_open_target) return "cur";
  if (id > tool_last_id) { tool_last_id = id; return "new"; }
  return "old";
}

static void on_target(ompt_target_t kind, ompt_scope_endpoint_t endpoint, int device_num,
                      ompt_data_t *task_data, ompt_id_t target_id, const void *codeptr_ra) {
  const char *rel = tool_id(target_id);
  if (endpoint == ompt_scope_begin) tool_open_target = target_id;
  printf("target %s %s dev=%d task=%d id=%s site%d\n", tool_kind(kind),
         tool_endpoint(endpoint), device_num, task_data != NULL, rel, tool_site(codeptr_ra));
  if (endpoint == ompt_scope_end) tool_open_target = 0;
}

static void on_data_op(ompt_id_t target_id, ompt_id_t host_op_id, ompt_target_data_op_t optype,
                       void *src, int src_dev, void *dst, int dst_dev, size_t bytes,
                       const void *codeptr_ra) {
  char b1[64], b2[64];
  const char *target = tool_id(target_id);
  printf("data_op %s target=%s op=%s src=%s/%d dst=%s/%d bytes=%zu site%d\n",
         tool_op(optype), target, tool_id(host_op_id), tool_addr(src, b1), src_dev,
         tool_addr(dst, b2), dst_dev, bytes, tool_site(codeptr_ra));
}

static void on_submit(ompt_id_t target_id, ompt_id_t host_op_id, unsigned int teams) {
  const char *target = tool_id(target_id);
  printf("submit target=%s op=%s teams=%u\n", target, tool_id(host_op_id), teams);
}

static void on_device_init(int device_num, const char *type, ompt_device_t *device,
                           ompt_function_lookup_t lookup, const char *documentation) {
  printf("device_initialize dev=%d type=%s lookup=%d\n", device_num, type ? type : "null",
         lookup != NULL);
}

static void on_device_finalize(int device_num) { printf("device_finalize dev=%d\n", device_num); }

static void on_device_load(int device_num, const char *filename, int64_t offset_in_file,
                           void *vma_in_file, size_t bytes, void *host_addr,
                           void *device_addr, uint64_t module_id) {
  printf("device_load dev=%d file=%s image=%d bytes>0=%d module=%lu\n", device_num,
         filename ? filename : "null", host_addr != NULL, bytes > 0, module_id);
}

static void on_device_unload(int device_num, uint64_t module_id) {
  printf("device_unload dev=%d\n", device_num);
}

static int tool_initialize(ompt_function_lookup_t lookup, int initial_device_num,
                           ompt_data_t *tool_data) {
  ompt_set_callback_t set = (ompt_set_callback_t)lookup("ompt_set_callback");
  if (!set) return 0;
  printf("tool initialized, initial device %d\n", initial_device_num);
#define REG(event, fn)                                                                     \
  printf("set_callback %s -> %d\n", #event, (int)set(event, (ompt_callback_t)fn))
  REG(ompt_callback_device_initialize, on_device_init);
  REG(ompt_callback_device_finalize, on_device_finalize);
  REG(ompt_callback_device_load, on_device_load);
  REG(ompt_callback_device_unload, on_device_unload);
#if TOOL_EMI
  REG(ompt_callback_target_emi, on_target_emi);
  REG(ompt_callback_target_data_op_emi, on_data_op_emi);
  REG(ompt_callback_target_submit_emi, on_submit_emi);
  REG(ompt_callback_target_map_emi, on_target_emi);
#else
  REG(ompt_callback_target, on_target);
  REG(ompt_callback_target_data_op, on_data_op);
  REG(ompt_callback_target_submit, on_submit);
  REG(ompt_callback_target_map, on_target);
#endif
#undef REG
  return 1;
}

static void tool_finalize(ompt_data_t *tool_data) { printf("tool finalized\n"); }

ompt_start_tool_result_t *ompt_start_tool(unsigned int omp_version,
                                          const char *runtime_version) {
  static ompt_start_tool_result_t result = {&tool_initialize, &tool_finalize, {0}};
  return &result;
}
