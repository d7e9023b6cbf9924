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

/* The users of a mapping (and its write descriptor) across a GIL release, against its close:
 * a writer enters before it touches them and leaves after; close marks the thing closing and
 * waits until every user has left, so munmap never runs under a copy (which would crash the
 * process) and no descriptor number is closed under a write through it. A user that comes
 * after the mark is refused (0). Sequentially consistent: the user's count before its look at
 * the mark, the closer's mark before its look at the count. */
static inline int dl_users_enter(int *users, const int *closing) {
    __atomic_add_fetch(users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(closing, __ATOMIC_SEQ_CST)) {
        __atomic_sub_fetch(users, 1, __ATOMIC_SEQ_CST);
        return 0;
    }
    return 1;
}

static inline void dl_users_leave(int *users) {
    __atomic_sub_fetch(users, 1, __ATOMIC_SEQ_CST);
}

static inline void dl_users_drain(int *users, int *closing) {
    __atomic_store_n(closing, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(users, __ATOMIC_SEQ_CST))
        sched_yield();
}

#endif
