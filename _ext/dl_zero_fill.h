/* Page cache made ahead of writes through a mapping, by writing zeros over a hole.
 *
 * A file written through its mapping (index units, consume-queue units) had the pages ahead of
 * its writer faulted in by madvise(MADV_POPULATE_WRITE). Over a hole that is a read fault per
 * page (the page zero-filled by the filesystem's read path) and then a page_mkwrite; a pwrite
 * of zeros over the same range, and then the populate, cost a fraction of that
 * (bench/page_costs.py --mapped; docs/message-store.md, "Zeros ahead of the mapped writers").
 * The bytes read the same: the zeros replace a hole. Only for a range nothing has been written
 * to, with every writer of the file kept out meanwhile: a write racing it would be lost. */
#ifndef DL_ZERO_FILL_H
#define DL_ZERO_FILL_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

#define DL_ZF_CHUNK 65536
#define DL_ZF_IOV 16

static const unsigned char dl_zf_zeros[DL_ZF_CHUNK];

/* Zeros over [start, end) of fd's file; 0, or the errno of the write that failed. */
static int dl_zero_fill_fd(int fd, int64_t start, int64_t end) {
    struct iovec iov[DL_ZF_IOV];
    while (start < end) {
        int64_t left = end - start;
        int count = 0;
        while (left > 0 && count < DL_ZF_IOV) {
            size_t n = left < DL_ZF_CHUNK ? (size_t)left : DL_ZF_CHUNK;
            iov[count].iov_base = (void *)dl_zf_zeros;
            iov[count].iov_len = n;
            left -= (int64_t)n;
            count++;
        }
        ssize_t r = pwritev(fd, iov, count, start);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (r == 0)
            return ENOSPC;
        start += r;
    }
    return 0;
}

/* The same for the file at path (opened and closed here). */
static int dl_zero_fill_path(const char *path, int64_t start, int64_t end) {
    if (start >= end)
        return 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = dl_zero_fill_fd(fd, start, end);
    close(fd);
    return err;
}

#endif
