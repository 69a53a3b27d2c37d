/* The CUDA plugin's one-call helper (plugins/_cuda_fast.py): a copy or a kernel launch
 * enqueued and spun on in one call, the GIL released throughout. Compiled after
 * accel_c/cuda_work.c, which does the work. */

/* copy(dst, src, size, stream) (cuMemcpyHtoDAsync or cuMemcpyDtoHAsync), then wait.
   Returns the first error, or CU_NOT_READY when the copy outlasts the spin. */
int offload_copy_wait(void *set_ctx, void *ctx, void *copy, uintptr_t dst, uintptr_t src,
                      size_t size, void *query, void *stream, double spin) {
  CuEntries e = {(set_ctx_t)set_ctx, ctx, NULL, (query_t)query, NULL};
  CuWork w = {0, (cu_copy_t)copy, dst, src, size, NULL, 0, 0, 0, NULL, 0, 0, {0}, {0}};
  return cuda_run_spin(&e, &w, stream, spin);
}

/* cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, shared, stream, params, NULL), then wait. */
int offload_launch_wait(void *set_ctx, void *ctx, void *launch, void *fn, unsigned grid,
                        unsigned block, unsigned shared, void *stream, void **params,
                        void *query, double spin) {
  CuEntries e = {(set_ctx_t)set_ctx, ctx, (cu_launch_t)launch, (query_t)query, NULL};
  CuWork w = {1, NULL, 0, 0, 0, fn, grid, block, shared, params, 0, 0, {0}, {0}};
  return cuda_run_spin(&e, &w, stream, spin);
}

/* cuda_spin of query (cuStreamQuery or cuEventQuery) on handle: one call of the common
   wait's spin (plugins/waits.py), the GIL released throughout. */
int offload_query_spin(void *query, void *handle, double spin) {
  return cuda_spin((query_t)query, handle, spin);
}
