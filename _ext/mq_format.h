/* RocketMQ 4.9 message store layout (CommitLog, MessageDecoder, ConsumeQueue, IndexFile): the commit-log record, consume-queue
 * unit and index file, big-endian like the DLedger formats in dl_format.h. Plain C so the
 * message kernel's nogil loops inline it. */
#ifndef MQ_FORMAT_H
#define MQ_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dl_format.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define MQ_MESSAGE_MAGIC (-626843481) /* 0xDAA320A7 */
#define MQ_BLANK_MAGIC (-875286124)   /* 0xCBD43194 */

/* Fixed positions inside a record (MessageDecoder). */
#define MQ_BODY_CRC_POS 8
#define MQ_QUEUE_ID_POS 12
#define MQ_FLAG_POS 16
#define MQ_QUEUE_OFFSET_POS 20
#define MQ_PHY_POS 28
#define MQ_SYSFLAG_POS 36
#define MQ_BORN_TS_POS 40
#define MQ_BORN_HOST_POS 48

#define MQ_BORNHOST_V6 0x10
#define MQ_STOREHOST_V6 0x20
#define MQ_MIN_RECORD 91 /* calMsgLength(0, 0, 0, 0) */
#define MQ_MAX_TOPIC 127
#define MQ_MAX_PROPS 32767
#define MQ_END_FILE_MIN_BLANK 8

#define MQ_CQ_UNIT 20
#define MQ_INDEX_HEADER 40
#define MQ_INDEX_SLOT 4
#define MQ_INDEX_ITEM 20

static inline uint16_t mq_get16(const unsigned char *p) {
    return (uint16_t)((p[0] << 8) | p[1]);
}
static inline void mq_put16(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}

static inline int mq_host_len(int32_t sys_flag, int32_t v6_flag) {
    return (sys_flag & v6_flag) ? 20 : 8;
}

/* CommitLog.calMsgLength. */
static inline int64_t mq_record_length(int32_t sys_flag, int64_t body_len, int64_t topic_len, int64_t props_len) {
    return 75 + mq_host_len(sys_flag, MQ_BORNHOST_V6) + mq_host_len(sys_flag, MQ_STOREHOST_V6)
        + (body_len > 0 ? body_len : 0) + topic_len + (props_len > 0 ? props_len : 0);
}

/* Java String.hashCode of `new String(s, UTF_8)`: h = 31 h + c over UTF-16 code units.
 * Ill-formed input becomes U+FFFD exactly as the JDK's UTF-8 decoder (StringCoding /
 * sun.nio.cs.UTF_8) does it: one per maximal ill-formed prefix, except that a 3-byte form of a
 * surrogate (ED A0..BF xx) is one U+FFFD for all three bytes, and a sequence cut by the end
 * of input is one U+FFFD and ends the string. */
#define MQ_REPL 0xFFFDu

static inline int mq_cont(unsigned char b) {
    return (b & 0xC0) == 0x80;
}

static inline uint64_t mq_load64(const unsigned char *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static inline uint32_t mq_load32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

#define MQ_HI8 0x8080808080808080ull

/* The index of the lowest set bit of ``m`` (not 0). */
static inline unsigned mq_ctz64(uint64_t m) {
#if defined(__GNUC__)
    return (unsigned)__builtin_ctzll(m);
#else
    unsigned b = 0;
    while (!(m & 1)) {
        m >>= 1;
        b++;
    }
    return b;
#endif
}

/* a*31^7 + b*31^6 + ... + h of the eight ASCII bytes ``s[0:8]`` (``x`` their load), mod 2^32.
 * Little-endian: in lanes of the word, pairs a*31 + b (16 bits each), then quads (32 bits),
 * then the two halves, three multiplies; otherwise the eight products. */
static inline uint32_t mq_poly8(uint64_t x, const unsigned char *s) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    (void)s;
    uint64_t pairs = (x & 0x00FF00FF00FF00FFull) * 31u + ((x >> 8) & 0x00FF00FF00FF00FFull);
    uint64_t quads = (pairs & 0x0000FFFF0000FFFFull) * 961u + ((pairs >> 16) & 0x0000FFFF0000FFFFull);
    return (uint32_t)quads * 923521u + (uint32_t)(quads >> 32);
#else
    (void)x;
    return (uint32_t)s[0] * 1742810335u + (uint32_t)s[1] * 887503681u + (uint32_t)s[2] * 28629151u
        + (uint32_t)s[3] * 923521u + (uint32_t)s[4] * 29791u + (uint32_t)s[5] * 961u + (uint32_t)s[6] * 31u
        + (uint32_t)s[7];
#endif
}

/* Java's hash continued from ``h`` over the UTF-16 units of UTF-8 ``s`` (as the hash of a
 * concatenation of separately decoded strings: ``topic + "#" + key``). */
static inline uint32_t mq_java_hash_utf8_from(uint32_t h, const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII eight at a time (no high bit in a 64-bit load): Horner over eight as one step,
         * h*31^8 + a*31^7 + ... + h' (31^k mod 2^32). */
        while (i + 8 <= n) {
            uint64_t x = mq_load64(s + i);
            if (x & MQ_HI8)
                break;
            h = h * 2487512833u + mq_poly8(x, s + i);
            i += 8;
        }
        /* ASCII four at a time: h*31^4 + a*31^3 + b*31^2 + c*31 + d, a shorter dependency chain. */
        while (i + 4 <= n && ((s[i] | s[i + 1] | s[i + 2] | s[i + 3]) & 0x80) == 0) {
            h = h * 923521u + (uint32_t)s[i] * 29791u + (uint32_t)s[i + 1] * 961u + (uint32_t)s[i + 2] * 31u
                + (uint32_t)s[i + 3];
            i += 4;
        }
        if (i >= n)
            break;
        unsigned char b1 = s[i++];
        if (b1 < 0x80) {
            h = 31 * h + b1;
        } else if (b1 >= 0xC2 && b1 <= 0xDF) {
            if (i >= n) {
                h = 31 * h + MQ_REPL;
                break;
            }
            if (mq_cont(s[i])) {
                h = 31 * h + ((uint32_t)(b1 & 0x1F) << 6 | (s[i] & 0x3F));
                i++;
            } else {
                h = 31 * h + MQ_REPL;
            }
        } else if ((b1 & 0xF0) == 0xE0) {
            if (i + 1 < n) {
                unsigned char b2 = s[i], b3 = s[i + 1];
                int bad2 = (b1 == 0xE0 && (b2 & 0xE0) == 0x80) || !mq_cont(b2);
                if (bad2 || !mq_cont(b3)) {
                    h = 31 * h + MQ_REPL;
                    if (!bad2)
                        i += 1; /* b1 b2 are one ill-formed prefix */
                } else {
                    uint32_t c = (uint32_t)(b1 & 0x0F) << 12 | (uint32_t)(b2 & 0x3F) << 6 | (b3 & 0x3F);
                    h = 31 * h + ((c >= 0xD800 && c <= 0xDFFF) ? MQ_REPL : c);
                    i += 2;
                }
            } else if (i < n && ((b1 == 0xE0 && (s[i] & 0xE0) == 0x80) || !mq_cont(s[i]))) {
                h = 31 * h + MQ_REPL;
            } else {
                h = 31 * h + MQ_REPL;
                break;
            }
        } else if ((b1 & 0xF8) == 0xF0) {
            if (i + 2 < n) {
                unsigned char b2 = s[i], b3 = s[i + 1], b4 = s[i + 2];
                uint32_t uc = (uint32_t)(b1 & 0x07) << 18 | (uint32_t)(b2 & 0x3F) << 12
                    | (uint32_t)(b3 & 0x3F) << 6 | (b4 & 0x3F);
                if (!mq_cont(b2) || !mq_cont(b3) || !mq_cont(b4) || uc < 0x10000 || uc > 0x10FFFF) {
                    h = 31 * h + MQ_REPL;
                    if (b1 > 0xF4 || (b1 == 0xF0 && (b2 < 0x90 || b2 > 0xBF))
                        || (b1 == 0xF4 && (b2 & 0xF0) != 0x80) || !mq_cont(b2))
                        ; /* the lead byte alone */
                    else if (!mq_cont(b3))
                        i += 1;
                    else
                        i += 2;
                } else {
                    uc -= 0x10000;
                    h = 31 * h + (0xD800 + (uc >> 10));
                    h = 31 * h + (0xDC00 + (uc & 0x3FF));
                    i += 3;
                }
            } else if (b1 > 0xF4 || (i < n && ((b1 == 0xF0 && (s[i] < 0x90 || s[i] > 0xBF))
                                               || (b1 == 0xF4 && (s[i] & 0xF0) != 0x80) || !mq_cont(s[i])))) {
                h = 31 * h + MQ_REPL;
            } else {
                i++;
                h = 31 * h + MQ_REPL;
                if (!(i < n && !mq_cont(s[i])))
                    break;
            }
        } else {
            h = 31 * h + MQ_REPL; /* 80..C1, F8..FF */
        }
    }
    return h;
}

static inline uint32_t mq_java_hash_utf8(const unsigned char *s, size_t n) {
    return mq_java_hash_utf8_from(0, s, n);
}

/* The bytes ``a[0:n]`` and ``b[0:n]`` are equal: memcmp for the short strings dispatch compares
 * (topics), without a libc call a record. */
static inline int mq_same(const unsigned char *a, const unsigned char *b, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        if (mq_load64(a + i) != mq_load64(b + i))
            return 0;
    if (n >= 8)
        return mq_load64(a + n - 8) == mq_load64(b + n - 8);
    if (n >= 4) /* two loads that overlap cover 4 to 7 bytes */
        return mq_load32(a) == mq_load32(b) && mq_load32(a + n - 4) == mq_load32(b + n - 4);
    for (; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* Bit masks of the bytes 1 (``m1``) and 2 (``m2``) among ``q[at : at + 64]``, bits past ``n``
 * clear: sixteen bytes a compare with SSE2 (x86-64's baseline), the last block read as the
 * sixteen bytes ending at ``n`` (never past it), a byte loop elsewhere. */
static inline void mq_sep_masks(const unsigned char *q, size_t at, size_t n, uint64_t *m1, uint64_t *m2) {
    uint64_t a1 = 0, a2 = 0;
    for (size_t j = 0; j < 64 && at + j < n; j += 16) {
        size_t s = at + j;
        uint32_t b1 = 0, b2 = 0;
#if defined(__SSE2__)
        if (n >= 16) {
            size_t from = s + 16 <= n ? s : n - 16;
            __m128i v = _mm_loadu_si128((const __m128i *)(q + from));
            b1 = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(1))) >> (s - from);
            b2 = (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(2))) >> (s - from);
        } else
#endif
        {
            for (size_t k = s; k < n && k < s + 16; k++) {
                b1 |= (uint32_t)(q[k] == 1) << (k - s);
                b2 |= (uint32_t)(q[k] == 2) << (k - s);
            }
        }
        a1 |= (uint64_t)b1 << j;
        a2 |= (uint64_t)b2 << j;
    }
    *m1 = a1;
    *m2 = a2;
}

/* The property ``q[i:e]`` (``sep`` its first \x01, or SIZE_MAX): its value's span into
 * ``vo``/``vl`` when its name is TAGS (0), UNIQ_KEY (1) or KEYS (2) and name and value are not
 * empty. */
static inline void mq_prop_end(const unsigned char *q, size_t i, size_t sep, size_t e, int64_t *vo, int64_t *vl) {
    uint32_t tags, keys;
    uint64_t uniq;
    if (sep == SIZE_MAX || sep <= i || sep + 1 >= e)
        return;
    memcpy(&tags, "TAGS", 4);
    memcpy(&keys, "KEYS", 4);
    memcpy(&uniq, "UNIQ_KEY", 8);
    int j = -1;
    if (sep - i == 4) {
        uint32_t w = mq_load32(q + i);
        j = w == tags ? 0 : w == keys ? 2 : -1;
    } else if (sep - i == 8 && mq_load64(q + i) == uniq) {
        j = 1;
    }
    if (j >= 0) {
        vo[j] = (int64_t)sep + 1;
        vl[j] = (int64_t)(e - sep - 1);
    }
}

/* MessageDecoder.string2messageProperties' spans of TAGS (0), UNIQ_KEY (1) and KEYS (2) in the
 * properties ``q[0:n]``, as property_spans_many finds them: ``name \x01 value`` pairs split by
 * \x02, a pair's name up to its first \x01, an empty name or value skipped, a later pair of a
 * name winning. ``vo`` the value offsets in ``q`` (-1 without), ``vl`` their lengths (0). The
 * separators found 64 bytes at a time as bit masks, then visited in order; a name compared as
 * one load. */
static inline void mq_dispatch_props(const unsigned char *q, size_t n, int64_t *vo, int64_t *vl) {
    vo[0] = vo[1] = vo[2] = -1;
    vl[0] = vl[1] = vl[2] = 0;
    size_t i = 0, sep = SIZE_MAX;
    for (size_t at = 0; at < n; at += 64) {
        uint64_t m1, m2;
        mq_sep_masks(q, at, n, &m1, &m2);
        uint64_t m = m1 | m2;
        while (m) {
            unsigned b = mq_ctz64(m);
            m &= m - 1;
            if ((m2 >> b) & 1) {
                mq_prop_end(q, i, sep, at + b, vo, vl);
                i = at + b + 1;
                sep = SIZE_MAX;
            } else if (sep == SIZE_MAX) {
                sep = at + b;
            }
        }
    }
    if (i < n)
        mq_prop_end(q, i, sep, n, vo, vl);
}


#endif
