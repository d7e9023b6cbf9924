/* DLedger 0.2.x on-disk layout (DLedgerEntry, DLedgerEntryCoder): big-endian entry header and
 * index unit.
 * Plain C so every kernel (codec, segment) shares one definition and the compiler can
 * inline it into the nogil loops. */
#ifndef DL_FORMAT_H
#define DL_FORMAT_H

#include <stdint.h>
#include <string.h>

#define DL_MAGIC_1 1
#define DL_CURRENT_MAGIC 1
#define DL_BLANK_MAGIC (-1)
#define DL_POS_OFFSET 24
#define DL_HEADER_SIZE 44
#define DL_BODY_OFFSET 48
#define DL_INDEX_UNIT 32
#define DL_MIN_BLANK_LEN 8

static inline void dl_put32(unsigned char *p, uint32_t v) {
    v = __builtin_bswap32(v);
    memcpy(p, &v, 4);
}
static inline void dl_put64(unsigned char *p, uint64_t v) {
    v = __builtin_bswap64(v);
    memcpy(p, &v, 8);
}
static inline uint32_t dl_get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return __builtin_bswap32(v);
}
static inline uint64_t dl_get64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return __builtin_bswap64(v);
}

/* Entry header: magic, size, index, term, pos, channel, chainCrc, bodyCrc, bodySize. */
static inline void dl_write_header(unsigned char *p, int32_t magic, int32_t size, int64_t index,
                                   int64_t term, int64_t pos, int32_t channel, int32_t chain_crc,
                                   int32_t body_crc, int32_t body_size) {
    dl_put32(p + 0, (uint32_t)magic);
    dl_put32(p + 4, (uint32_t)size);
    dl_put64(p + 8, (uint64_t)index);
    dl_put64(p + 16, (uint64_t)term);
    dl_put64(p + 24, (uint64_t)pos);
    dl_put32(p + 32, (uint32_t)channel);
    dl_put32(p + 36, (uint32_t)chain_crc);
    dl_put32(p + 40, (uint32_t)body_crc);
    dl_put32(p + 44, (uint32_t)body_size);
}

/* Index unit: magic, pos, size, index, term. */
static inline void dl_write_index(unsigned char *p, int32_t magic, int64_t pos, int32_t size,
                                  int64_t index, int64_t term) {
    dl_put32(p + 0, (uint32_t)magic);
    dl_put64(p + 4, (uint64_t)pos);
    dl_put32(p + 12, (uint32_t)size);
    dl_put64(p + 16, (uint64_t)index);
    dl_put64(p + 24, (uint64_t)term);
}

static inline void dl_write_blank(unsigned char *p, int32_t len) {
    dl_put32(p + 0, (uint32_t)DL_BLANK_MAGIC);
    dl_put32(p + 4, (uint32_t)len);
}

/* Fetch the cache line at ``p`` for a read soon; an address past the mapping is harmless. */
static inline void dl_prefetch_r(const void *p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, 0, 3);
#else
    (void)p;
#endif
}

#endif
