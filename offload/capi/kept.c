/* The drop-in library's way to a kept kernel region or data construct with no Python code
 * run (offload/capi/build.py puts it before the exports): the compiled core's entries
 * (offload/accel_c/hot.c), given by offload_set_hot once connected, called with
 * kernel_many's or data_one's arguments and the device number resolved as libomp names
 * the default device. */
typedef int (*offload_hot_fn)(void *, int32_t, int64_t, int32_t, int32_t, uintptr_t,
                              uint64_t, int32_t, uintptr_t, uintptr_t, uintptr_t, uintptr_t,
                              uintptr_t);
typedef int (*offload_hot_data_fn)(void *, int32_t, int64_t, uintptr_t, uintptr_t, int64_t,
                                   uint64_t);
static offload_hot_fn offload_hot;
static offload_hot_data_fn offload_hot_data;
extern int omp_get_default_device(void) __attribute__((weak));

void offload_set_hot(uintptr_t fn, uintptr_t data_fn) {
    __atomic_store_n(&offload_hot_data, (offload_hot_data_fn)data_fn, __ATOMIC_RELEASE);
    __atomic_store_n(&offload_hot, (offload_hot_fn)fn, __ATOMIC_RELEASE);
}

/* The kept data construct run by the core: 1 once done, 0 with nothing done. */
static int offload_kept_data(void *loc, int32_t export, int64_t dev, uintptr_t base,
                             uintptr_t begin, int64_t size, uint64_t type) {
    offload_hot_data_fn f = __atomic_load_n(&offload_hot_data, __ATOMIC_ACQUIRE);
    if (f == NULL || dev < -1 || (dev == -1 && omp_get_default_device == NULL))
        return 0;
    return f(loc, export, dev == -1 ? omp_get_default_device() : dev, base, begin, size,
             type);
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
