/* RocketMQ 4.9 message store layout (CommitLog, MessageDecoder, ConsumeQueue, IndexFile): the commit-log record, consume-queue
 * unit and index file, big-endian like the DLedger formats in dl_format.h. Plain C so the
 * message kernel's nogil loops inline it. */
#ifndef MQ_FORMAT_H
#define MQ_FORMAT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dl_format.h"

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

/* Java's hash continued from ``h`` over the UTF-16 units of UTF-8 ``s`` (as the hash of a
 * concatenation of separately decoded strings: ``topic + "#" + key``). */
static inline uint32_t mq_java_hash_utf8_from(uint32_t h, const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* ASCII eight at a time (no high bit in a 64-bit load): Horner over eight as one step,
         * h*31^8 + a*31^7 + ... + h', whose products are independent (31^k mod 2^32). */
        while (i + 8 <= n && (mq_load64(s + i) & MQ_HI8) == 0) {
            h = h * 2487512833u + (uint32_t)s[i] * 1742810335u + (uint32_t)s[i + 1] * 887503681u
                + (uint32_t)s[i + 2] * 28629151u + (uint32_t)s[i + 3] * 923521u + (uint32_t)s[i + 4] * 29791u
                + (uint32_t)s[i + 5] * 961u + (uint32_t)s[i + 6] * 31u + (uint32_t)s[i + 7];
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

/* Fetch the cache line at ``p`` for a write soon (nothing where the compiler has no prefetch). */
static inline void mq_prefetch_w(const void *p) {
#if defined(__GNUC__)
    __builtin_prefetch(p, 1, 3);
#else
    (void)p;
#endif
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
    for (; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* The first i in [i, n) where s[i] is a property separator (1 or 2), or n. Eight bytes a step:
 * (x - 0x03..03) & ~x & 0x80..80 flags bytes below 3, the lowest flag exactly (a borrow only
 * makes flags above a true one); a 0 byte there sends the rest of the eight to the byte loop. */
static inline size_t mq_next_sep(const unsigned char *s, size_t i, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; i + 8 <= n; i += 8) {
        uint64_t x = mq_load64(s + i);
        uint64_t m = (x - 0x0303030303030303ull) & ~x & MQ_HI8;
        if (m) {
            size_t j = i + ((size_t)__builtin_ctzll(m) >> 3);
            for (; j < i + 8; j++)
                if (s[j] == 1 || s[j] == 2)
                    return j;
        }
    }
#endif
    for (; i < n; i++)
        if (s[i] == 1 || s[i] == 2)
            return i;
    return n;
}

/* MessageDecoder.string2messageProperties' spans of TAGS (0), UNIQ_KEY (1) and KEYS (2) in the
 * properties ``q[0:n]``, as property_spans_many finds them: ``name \x01 value`` pairs split by
 * \x02, a pair's name up to its first \x01, an empty name or value skipped, a later pair of a
 * name winning. ``vo`` the value offsets in ``q`` (-1 without), ``vl`` their lengths (0). One
 * pass over the bytes, the names compared as one load each. */
static inline void mq_dispatch_props(const unsigned char *q, size_t n, int64_t *vo, int64_t *vl) {
    uint32_t tags, keys;
    uint64_t uniq;
    memcpy(&tags, "TAGS", 4);
    memcpy(&keys, "KEYS", 4);
    memcpy(&uniq, "UNIQ_KEY", 8);
    vo[0] = vo[1] = vo[2] = -1;
    vl[0] = vl[1] = vl[2] = 0;
    size_t i = 0;
    while (i < n) {
        size_t e = mq_next_sep(q, i, n), sep = n;
        if (e < n && q[e] == 1) {
            sep = e;
            do
                e = mq_next_sep(q, e + 1, n);
            while (e < n && q[e] != 2);
        }
        if (sep < n && sep > i && sep + 1 < e) {
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
        i = e + 1;
    }
}

#endif
