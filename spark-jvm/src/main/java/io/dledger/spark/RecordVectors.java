package io.dledger.spark;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One {@link ColumnVector} class per kind of column, each reading its value from the batch's
 * record bytes when Spark asks (a call site of Spark's generated code sees one class). Values
 * follow the Python format's columns: commit_log_offset is the record's position, timestamps are
 * microseconds (Spark's TimestampType), msg_id is MessageDecoder.createMessageId's upper-case hex.
 */
final class RecordVectors {
    private RecordVectors() {}

    static ColumnVector of(String column, RecordRows rows) {
        switch (column) {
            case "topic":
                return new Topic(rows);
            case "queue_id":
                return new IntAt(rows, RecordFormat.QUEUE_ID_POS);
            case "queue_offset":
                return new LongAt(rows, RecordFormat.QUEUE_OFFSET_POS, DataTypes.LongType);
            case "commit_log_offset":
                return new CommitLogOffset(rows);
            case "size":
                return new IntAt(rows, 0);
            case "msg_id":
                return new MsgId(rows);
            case "tags":
                return new PropertyValue(rows, true);
            case "keys":
                return new PropertyValue(rows, false);
            case "properties":
                return new Properties(rows);
            case "body":
                return new Body(rows);
            case "body_crc":
                return new IntAt(rows, RecordFormat.BODY_CRC_POS);
            case "flag":
                return new IntAt(rows, RecordFormat.FLAG_POS);
            case "sys_flag":
                return new IntAt(rows, RecordFormat.SYSFLAG_POS);
            case "born_timestamp":
                return new LongAt(rows, RecordFormat.BORN_TIMESTAMP_POS, DataTypes.TimestampType);
            case "store_timestamp":
                return new StoreTimestamp(rows);
            case "born_host":
                return new Host(rows, false);
            case "store_host":
                return new Host(rows, true);
            case "reconsume_times":
                return new AfterStoreHost(rows, 0, DataTypes.IntegerType);
            case "prepared_transaction_offset":
                return new AfterStoreHost(rows, 4, DataTypes.LongType);
            default:
                throw new IllegalArgumentException("unknown column " + column);
        }
    }

    /** What every vector here shares: no nulls unless it says so, and no other getter. */
    abstract static class Base extends ColumnVector {
        final RecordRows rows;

        Base(RecordRows rows, DataType type) {
            super(type);
            this.rows = rows;
        }

        @Override
        public void close() {}

        @Override
        public boolean hasNull() {
            return false;
        }

        @Override
        public int numNulls() {
            return 0;
        }

        @Override
        public boolean isNullAt(int rowId) {
            return false;
        }

        private UnsupportedOperationException no(String what) {
            return new UnsupportedOperationException(what + " of a " + type.simpleString() + " message column");
        }

        @Override
        public boolean getBoolean(int rowId) {
            throw no("getBoolean");
        }

        @Override
        public byte getByte(int rowId) {
            throw no("getByte");
        }

        @Override
        public short getShort(int rowId) {
            throw no("getShort");
        }

        @Override
        public int getInt(int rowId) {
            throw no("getInt");
        }

        @Override
        public long getLong(int rowId) {
            throw no("getLong");
        }

        @Override
        public float getFloat(int rowId) {
            throw no("getFloat");
        }

        @Override
        public double getDouble(int rowId) {
            throw no("getDouble");
        }

        @Override
        public ColumnarArray getArray(int rowId) {
            throw no("getArray");
        }

        @Override
        public ColumnarMap getMap(int ordinal) {
            throw no("getMap");
        }

        @Override
        public Decimal getDecimal(int rowId, int precision, int scale) {
            throw no("getDecimal");
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            throw no("getUTF8String");
        }

        @Override
        public byte[] getBinary(int rowId) {
            throw no("getBinary");
        }

        @Override
        public ColumnVector getChild(int ordinal) {
            throw no("getChild");
        }
    }

    static final class IntAt extends Base {
        private final int pos;

        IntAt(RecordRows rows, int pos) {
            super(rows, DataTypes.IntegerType);
            this.pos = pos;
        }

        @Override
        public int getInt(int rowId) {
            return RecordFormat.i32(rows.data, rows.rec[rowId] + pos);
        }
    }

    /** A long at a fixed position; a timestamp's milliseconds become Spark's microseconds. */
    static final class LongAt extends Base {
        private final int pos;
        private final long scale;

        LongAt(RecordRows rows, int pos, DataType type) {
            super(rows, type);
            this.pos = pos;
            this.scale = type == DataTypes.TimestampType ? 1000L : 1L;
        }

        @Override
        public long getLong(int rowId) {
            return RecordFormat.i64(rows.data, rows.rec[rowId] + pos) * scale;
        }
    }

    static final class StoreTimestamp extends Base {
        StoreTimestamp(RecordRows rows) {
            super(rows, DataTypes.TimestampType);
        }

        @Override
        public long getLong(int rowId) {
            int at = rows.rec[rowId];
            return RecordFormat.i64(rows.data, at + RecordFormat.storeTimestampPos(rows.sysFlag(rowId))) * 1000L;
        }
    }

    /** reconsume_times (int, just after the store host) and prepared_transaction_offset (long, 4 on). */
    static final class AfterStoreHost extends Base {
        private final int delta;

        AfterStoreHost(RecordRows rows, int delta, DataType type) {
            super(rows, type);
            this.delta = delta;
        }

        private int at(int rowId) {
            return rows.rec[rowId] + RecordFormat.reconsumeTimesPos(rows.sysFlag(rowId)) + delta;
        }

        @Override
        public int getInt(int rowId) {
            return RecordFormat.i32(rows.data, at(rowId));
        }

        @Override
        public long getLong(int rowId) {
            return RecordFormat.i64(rows.data, at(rowId));
        }
    }

    static final class CommitLogOffset extends Base {
        CommitLogOffset(RecordRows rows) {
            super(rows, DataTypes.LongType);
        }

        @Override
        public long getLong(int rowId) {
            return rows.commitLogOffset(rowId);
        }
    }

    static final class Topic extends Base {
        Topic(RecordRows rows) {
            super(rows, DataTypes.StringType);
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            return UTF8String.fromBytes(rows.data, rows.topicOff[rowId], rows.topicLen[rowId]);
        }
    }

    static final class Body extends Base {
        Body(RecordRows rows) {
            super(rows, DataTypes.BinaryType);
        }

        @Override
        public byte[] getBinary(int rowId) {
            int at = rows.bodyOff[rowId];
            return Arrays.copyOfRange(rows.data, at, at + rows.bodyLen[rowId]);
        }
    }

    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);

    /** MessageDecoder.createMessageId: the store host field, then the 8-byte offset, in hex. */
    static final class MsgId extends Base {
        MsgId(RecordRows rows) {
            super(rows, DataTypes.StringType);
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            int sysFlag = rows.sysFlag(rowId);
            int hostLen = RecordFormat.hostLength(sysFlag, RecordFormat.STOREHOSTADDRESS_V6_FLAG);
            int at = rows.rec[rowId] + RecordFormat.storeHostPos(sysFlag);
            byte[] out = new byte[2 * (hostLen + 8)];
            int o = 0;
            for (int i = 0; i < hostLen; i++) {
                int v = rows.data[at + i] & 0xFF;
                out[o++] = HEX[v >>> 4];
                out[o++] = HEX[v & 15];
            }
            long phys = rows.commitLogOffset(rowId);
            for (int shift = 56; shift >= 0; shift -= 8) {
                int v = (int) (phys >>> shift) & 0xFF;
                out[o++] = HEX[v >>> 4];
                out[o++] = HEX[v & 15];
            }
            return UTF8String.fromBytes(out);
        }
    }

    /**
     * InetSocketAddress text of a host field: {@code a.b.c.d:port}, or {@code [x:x:x:x:x:x:x:x]:port}
     * with eight uncompressed lower-case groups (InetAddress.getHostAddress), as the Python format.
     */
    static final class Host extends Base {
        private final boolean store;

        Host(RecordRows rows, boolean store) {
            super(rows, DataTypes.StringType);
            this.store = store;
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            int sysFlag = rows.sysFlag(rowId);
            int at;
            int hostLen;
            if (store) {
                at = rows.rec[rowId] + RecordFormat.storeHostPos(sysFlag);
                hostLen = RecordFormat.hostLength(sysFlag, RecordFormat.STOREHOSTADDRESS_V6_FLAG);
            } else {
                at = rows.rec[rowId] + RecordFormat.BORN_HOST_POS;
                hostLen = RecordFormat.hostLength(sysFlag, RecordFormat.BORNHOST_V6_FLAG);
            }
            byte[] d = rows.data;
            StringBuilder sb = new StringBuilder(48);
            if (hostLen == 8) {
                for (int i = 0; i < 4; i++) {
                    if (i > 0) {
                        sb.append('.');
                    }
                    sb.append(d[at + i] & 0xFF);
                }
            } else {
                sb.append('[');
                for (int i = 0; i < 8; i++) {
                    if (i > 0) {
                        sb.append(':');
                    }
                    sb.append(Integer.toHexString(((d[at + 2 * i] & 0xFF) << 8) | (d[at + 2 * i + 1] & 0xFF)));
                }
                sb.append(']');
            }
            sb.append(':').append(RecordFormat.i32(d, at + hostLen - 4));
            return UTF8String.fromString(sb.toString());
        }
    }

    /** The TAGS or KEYS property; null where the record has none. */
    static final class PropertyValue extends Base {
        private final boolean tags;

        PropertyValue(RecordRows rows, boolean tags) {
            super(rows, DataTypes.StringType);
            this.tags = tags;
        }

        @Override
        public boolean hasNull() {
            return numNulls() > 0;
        }

        @Override
        public int numNulls() {
            RecordRows.PropertyIndex p = rows.properties();
            int[] off = tags ? p.tagsOff : p.keysOff;
            int nulls = 0;
            for (int k = 0; k < rows.count; k++) {
                nulls += off[k] < 0 ? 1 : 0;
            }
            return nulls;
        }

        @Override
        public boolean isNullAt(int rowId) {
            RecordRows.PropertyIndex p = rows.properties();
            return (tags ? p.tagsOff : p.keysOff)[rowId] < 0;
        }

        @Override
        public UTF8String getUTF8String(int rowId) {
            RecordRows.PropertyIndex p = rows.properties();
            int off = (tags ? p.tagsOff : p.keysOff)[rowId];
            if (off < 0) {
                return null;
            }
            return UTF8String.fromBytes(rows.data, off, (tags ? p.tagsLen : p.keysLen)[rowId]);
        }
    }

    /** The properties map: its keys and values are views of the batch's property spans. */
    static final class Properties extends Base {
        private final Spans keys;
        private final Spans values;

        Properties(RecordRows rows) {
            super(rows, MessageColumns.TYPES.get("properties"));
            this.keys = new Spans(rows, true);
            this.values = new Spans(rows, false);
        }

        @Override
        public ColumnarMap getMap(int rowId) {
            RecordRows.PropertyIndex p = rows.properties();
            int from = p.entryStart[rowId];
            return new ColumnarMap(keys, values, from, p.entryStart[rowId + 1] - from);
        }

        @Override
        public ColumnVector getChild(int ordinal) {
            return ordinal == 0 ? keys : values;
        }
    }

    /** The names (or values) of every property entry of the batch, by entry number. */
    static final class Spans extends Base {
        private final boolean names;

        Spans(RecordRows rows, boolean names) {
            super(rows, DataTypes.StringType);
            this.names = names;
        }

        @Override
        public UTF8String getUTF8String(int entry) {
            RecordRows.PropertyIndex p = rows.properties();
            return names
                    ? UTF8String.fromBytes(rows.data, p.keyOff[entry], p.keyLen[entry])
                    : UTF8String.fromBytes(rows.data, p.valOff[entry], p.valLen[entry]);
        }
    }
}
