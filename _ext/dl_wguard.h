/* The write guard of a segment file whose pages a service thread makes ahead of the writer by
 * writing zeros there (MappedFile.prewrite). A spinlock: the pre-writer holds it for one
 * write of zeros past everything written; a writer takes it only when its write reaches past
 * what the pre-writer may be writing, which it does not while the pre-writer keeps ahead. */
#ifndef DL_WGUARD_H
#define DL_WGUARD_H

#include <sched.h>
#include <stdint.h>

static inline void dl_wguard_lock(int *lock) {
    while (__atomic_exchange_n(lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

static inline void dl_wguard_unlock(int *lock) {
    __atomic_store_n(lock, 0, __ATOMIC_RELEASE);
}

static inline int64_t dl_load_i64(const int64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void dl_store_i64(int64_t *p, int64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

#endif
