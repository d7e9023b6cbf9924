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

/* Java's hash continued from ``h`` over the UTF-16 units of UTF-8 ``s`` (as the hash of a
 * concatenation of separately decoded strings: ``topic + "#" + key``). */
static inline uint32_t mq_java_hash_utf8_from(uint32_t h, const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
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

#endif
