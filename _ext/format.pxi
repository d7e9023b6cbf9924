# C declarations of dl_format.h and crc32_impl.h, shared by the kernels (included, not cimported,
# so no extra module is built for them).

from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

cdef extern from "dl_format.h" nogil:
    int DL_CURRENT_MAGIC
    int DL_MAGIC_1
    int DL_BLANK_MAGIC
    int DL_POS_OFFSET
    int DL_HEADER_SIZE
    int DL_BODY_OFFSET
    int DL_INDEX_UNIT
    int DL_MIN_BLANK_LEN
    uint32_t dl_get32(const unsigned char *p)
    uint64_t dl_get64(const unsigned char *p)
    void dl_prefetch_r(const void *p)
    void dl_write_header(unsigned char *p, int32_t magic, int32_t size, int64_t index,
                         int64_t term, int64_t pos, int32_t channel, int32_t chain_crc,
                         int32_t body_crc, int32_t body_size)
    void dl_write_index(unsigned char *p, int32_t magic, int64_t pos, int32_t size,
                        int64_t index, int64_t term)
    void dl_write_blank(unsigned char *p, int32_t length)

cdef extern from "crc32_impl.h" nogil:
    uint32_t dl_crc32(uint32_t crc, const unsigned char *buf, size_t length)
