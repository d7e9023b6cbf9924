/* Page cache made ahead of a writer by writing zeros over a hole: MappedFile.prewrite's, ahead
 * of the pwrites of appends (under its write guard), and dispatch's, ahead of writes through a
 * mapping.
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
/* The most one pwritev of zeros writes (MappedFile.prewrite's hold of the write guard). */
#define DL_ZF_MAX ((int64_t)DL_ZF_CHUNK * DL_ZF_IOV)

static const unsigned char dl_zf_zeros[DL_ZF_CHUNK];

/* Zeros over [start, end) of fd's file; 0, or the errno of the write that failed. *done (when
 * not NULL) counts the bytes written, also when it fails. */
static int dl_zero_fill_fd(int fd, int64_t start, int64_t end, int64_t *done) {
    struct iovec iov[DL_ZF_IOV];
    int64_t at = start;
    int err = 0;
    while (at < end) {
        int64_t left = end - at;
        int count = 0;
        while (left > 0 && count < DL_ZF_IOV) {
            size_t n = left < DL_ZF_CHUNK ? (size_t)left : DL_ZF_CHUNK;
            iov[count].iov_base = (void *)dl_zf_zeros;
            iov[count].iov_len = n;
            left -= (int64_t)n;
            count++;
        }
        ssize_t r = pwritev(fd, iov, count, at);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            err = errno;
            break;
        }
        if (r == 0) {
            err = ENOSPC;
            break;
        }
        at += r;
    }
    if (done != NULL)
        *done = at - start;
    return err;
}

/* The same for the file at path (opened and closed here). */
static int dl_zero_fill_path(const char *path, int64_t start, int64_t end) {
    if (start >= end)
        return 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    int err = dl_zero_fill_fd(fd, start, end, NULL);
    close(fd);
    return err;
}

#endif
