/* The drop-in library's way to a kept kernel region with no Python code run (offload/capi/
 * build.py puts it before the exports): the compiled core's entry (offload/accel_c/hot.c),
 * given by offload_set_hot once the core keeps a region, called with kernel_many's
 * arguments and the device number resolved as libomp names the default device. */
typedef int (*offload_hot_fn)(void *, int32_t, int64_t, int32_t, int32_t, uintptr_t,
                              uint64_t, int32_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t,
                              uintptr_t);
static offload_hot_fn offload_hot;
extern int omp_get_default_device(void) __attribute__((weak));

void offload_set_hot(uintptr_t fn) {
    __atomic_store_n(&offload_hot, (offload_hot_fn)fn, __ATOMIC_RELEASE);
}

/* The kept region run by the core: what its export returns, or `general` with nothing
   done (no entry given, a device number but the default's or a device's). */
static int offload_kept(int general, void *loc, int32_t export, int64_t dev, int32_t teams,
                        int32_t threads, uintptr_t region, uint64_t trip, int32_t n,
                        uintptr_t bases, uintptr_t begins, uintptr_t sizes, uintptr_t types,
                        uintptr_t mappers) {
    offload_hot_fn f = __atomic_load_n(&offload_hot, __ATOMIC_ACQUIRE);
    if (f == NULL || dev < -1 || (dev == -1 && omp_get_default_device == NULL))
        return general;
    return f(loc, export, dev == -1 ? omp_get_default_device() : dev, teams, threads, region,
             trip, n, bases, begins, sizes, types, mappers);
}
