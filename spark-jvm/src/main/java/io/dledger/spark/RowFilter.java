package io.dledger.spark;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Collection;
import java.util.LinkedHashSet;
import java.util.Set;
import java.util.TreeSet;

/**
 * The rows a read keeps, from the filters Spark pushed down on topic, queue_id, queue_offset and
 * store_timestamp: applied exactly while the records are walked, so a dropped row is never built.
 */
final class RowFilter implements Serializable {
    private static final long serialVersionUID = 1L;

    /** The topics kept (UTF-8), or null for every topic. */
    private byte[][] topics;
    /** The queue ids kept, sorted, or null for every queue. */
    private int[] queueIds;
    long queueIdMin = Integer.MIN_VALUE;
    long queueIdMax = Integer.MAX_VALUE;
    long queueOffsetMin = Long.MIN_VALUE;
    long queueOffsetMax = Long.MAX_VALUE;
    /** store_timestamp bounds in Spark's microseconds, both inclusive. */
    long storeMicrosMin = Long.MIN_VALUE;
    long storeMicrosMax = Long.MAX_VALUE;

    boolean isEmpty() {
        return topics == null && queueIds == null && queueIdMin == Integer.MIN_VALUE
                && queueIdMax == Integer.MAX_VALUE && queueOffsetMin == Long.MIN_VALUE
                && queueOffsetMax == Long.MAX_VALUE && storeMicrosMin == Long.MIN_VALUE
                && storeMicrosMax == Long.MAX_VALUE;
    }

    /** Keep only these topics (intersected with any kept already). */
    void keepTopics(Collection<String> wanted) {
        Set<String> have = new LinkedHashSet<>(wanted);
        if (topics != null) {
            Set<String> before = new LinkedHashSet<>();
            for (byte[] t : topics) {
                before.add(new String(t, StandardCharsets.UTF_8));
            }
            have.retainAll(before);
        }
        topics = have.stream().map(t -> t.getBytes(StandardCharsets.UTF_8)).toArray(byte[][]::new);
    }

    void keepQueueIds(Collection<Integer> wanted) {
        Set<Integer> have = new TreeSet<>(wanted);
        if (queueIds != null) {
            Set<Integer> before = new TreeSet<>();
            for (int q : queueIds) {
                before.add(q);
            }
            have.retainAll(before);
        }
        queueIds = have.stream().mapToInt(Integer::intValue).toArray();
    }

    boolean keeps(byte[] d, int at, RecordFormat.Parts p) {
        if (topics != null && !topicKept(d, p)) {
            return false;
        }
        int queueId = RecordFormat.i32(d, at + RecordFormat.QUEUE_ID_POS);
        if (queueId < queueIdMin || queueId > queueIdMax) {
            return false;
        }
        if (queueIds != null && Arrays.binarySearch(queueIds, queueId) < 0) {
            return false;
        }
        long queueOffset = RecordFormat.i64(d, at + RecordFormat.QUEUE_OFFSET_POS);
        if (queueOffset < queueOffsetMin || queueOffset > queueOffsetMax) {
            return false;
        }
        if (storeMicrosMin != Long.MIN_VALUE || storeMicrosMax != Long.MAX_VALUE) {
            int sysFlag = RecordFormat.i32(d, at + RecordFormat.SYSFLAG_POS);
            long micros = RecordFormat.i64(d, at + RecordFormat.storeTimestampPos(sysFlag)) * 1000L;
            return micros >= storeMicrosMin && micros <= storeMicrosMax;
        }
        return true;
    }

    private boolean topicKept(byte[] d, RecordFormat.Parts p) {
        for (byte[] t : topics) {
            if (t.length == p.topicLen && Arrays.equals(d, p.topicOff, p.topicOff + p.topicLen, t, 0, t.length)) {
                return true;
            }
        }
        return false;
    }
}
