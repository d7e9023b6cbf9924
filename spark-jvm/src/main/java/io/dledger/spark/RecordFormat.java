package io.dledger.spark;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;

/**
 * A RocketMQ 4.9.4 classic commit-log record (CommitLog / MessageDecoder): the checks of
 * {@code CommitLog.checkMessageAndReturnSize}, and every variable-length part within the size,
 * as the Cython walk ({@code _ext/message.pyx} {@code _parse_record}) applies them.
 */
final class RecordFormat {
    private RecordFormat() {}

    static final int MESSAGE_MAGIC_CODE = 0xDAA320A7;
    static final int BLANK_MAGIC_CODE = 0xCBD43194;

    static final int BODY_CRC_POS = 8;
    static final int QUEUE_ID_POS = 12;
    static final int FLAG_POS = 16;
    static final int QUEUE_OFFSET_POS = 20;
    static final int SYSFLAG_POS = 36;
    static final int BORN_TIMESTAMP_POS = 40;
    static final int BORN_HOST_POS = 48;

    static final int BORNHOST_V6_FLAG = 0x10;
    static final int STOREHOSTADDRESS_V6_FLAG = 0x20;
    /** calMsgLength(0, 0, 0, 0). */
    static final int MIN_RECORD = 91;

    /** Walk outcomes besides a record. */
    static final int OK = 0;
    static final int BLANK = 1;
    static final int ZERO = 2;
    static final int BAD = 3;
    /** The header is sound but the record runs past the bytes at hand: read more. */
    static final int SHORT = 4;

    private static final VarHandle I32 = MethodHandles.byteArrayViewVarHandle(int[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle I64 = MethodHandles.byteArrayViewVarHandle(long[].class, ByteOrder.BIG_ENDIAN);
    private static final VarHandle I16 = MethodHandles.byteArrayViewVarHandle(short[].class, ByteOrder.BIG_ENDIAN);

    static int i32(byte[] b, int at) {
        return (int) I32.get(b, at);
    }

    static long i64(byte[] b, int at) {
        return (long) I64.get(b, at);
    }

    static int hostLength(int sysFlag, int v6Flag) {
        return (sysFlag & v6Flag) != 0 ? 20 : 8;
    }

    /** Where the store timestamp is in a record of this sys flag. */
    static int storeTimestampPos(int sysFlag) {
        return BORN_HOST_POS + hostLength(sysFlag, BORNHOST_V6_FLAG);
    }

    static int storeHostPos(int sysFlag) {
        return storeTimestampPos(sysFlag) + 8;
    }

    static int reconsumeTimesPos(int sysFlag) {
        return storeHostPos(sysFlag) + hostLength(sysFlag, STOREHOSTADDRESS_V6_FLAG);
    }

    /** The parts of the record at {@code b[at:]}, when {@link #parse} found one. */
    static final class Parts {
        int size;
        int bodyOff;
        int bodyLen;
        int topicOff;
        int topicLen;
        int propsOff;
        int propsLen;
    }

    /**
     * OK and {@code out} filled when a whole valid record starts at {@code b[at]} within
     * {@code avail} bytes; SHORT when its header is sound but it is longer than {@code avail}
     * (and {@code more} says bytes follow); else BLANK, ZERO or BAD.
     */
    static int parse(byte[] b, int at, int avail, boolean more, Parts out) {
        if (avail < 4) {
            if (more) {
                return SHORT;
            }
            for (int k = 0; k < avail; k++) {
                if (b[at + k] != 0) {
                    return BAD;
                }
            }
            return ZERO;
        }
        int size = i32(b, at);
        if (size == 0) {
            return ZERO;
        }
        if (avail < 8) {
            return more ? SHORT : BAD;
        }
        int magic = i32(b, at + 4);
        if (magic == BLANK_MAGIC_CODE) {
            return BLANK;
        }
        if (magic != MESSAGE_MAGIC_CODE || size < MIN_RECORD) {
            return BAD;
        }
        if (size > avail) {
            return more ? SHORT : BAD;
        }
        int sysFlag = i32(b, at + SYSFLAG_POS);
        int p = reconsumeTimesPos(sysFlag) + 4 + 8;
        if (p + 4 + 1 + 2 > size) {
            return BAD;
        }
        int bodyLen = i32(b, at + p);
        if (bodyLen < 0 || bodyLen > size - (p + 4 + 1 + 2)) {
            return BAD;
        }
        int bodyOff = p + 4;
        p = bodyOff + bodyLen;
        int topicLen = b[at + p];
        if (topicLen < 0 || p + 1 + topicLen + 2 > size) {
            return BAD;
        }
        int topicOff = p + 1;
        p = topicOff + topicLen;
        int propsLen = (short) I16.get(b, at + p);
        if (propsLen < 0 || p + 2 + propsLen != size) {
            return BAD;
        }
        out.size = size;
        out.bodyOff = at + bodyOff;
        out.bodyLen = bodyLen;
        out.topicOff = at + topicOff;
        out.topicLen = topicLen;
        out.propsOff = at + p + 2;
        out.propsLen = propsLen;
        return OK;
    }
}
