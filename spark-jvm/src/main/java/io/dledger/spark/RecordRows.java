package io.dledger.spark;

import java.util.Arrays;

/**
 * The records of one batch: where each lies in the bytes read from its file, and the spans of its
 * variable-length parts. The column vectors read their values from here on demand, so a column
 * Spark does not ask for costs nothing, and strings are views of these bytes (no copy).
 */
final class RecordRows {
    byte[] data = new byte[0];
    /** Commit-log offset of {@code data[0]}. */
    long base;
    int count;
    int[] rec;
    int[] bodyOff;
    int[] bodyLen;
    int[] topicOff;
    int[] topicLen;
    int[] propsOff;
    int[] propsLen;
    private PropertyIndex properties;

    RecordRows(int capacity) {
        rec = new int[capacity];
        bodyOff = new int[capacity];
        bodyLen = new int[capacity];
        topicOff = new int[capacity];
        topicLen = new int[capacity];
        propsOff = new int[capacity];
        propsLen = new int[capacity];
    }

    void reset(byte[] data, long base) {
        this.data = data;
        this.base = base;
        this.count = 0;
        this.properties = null;
    }

    void add(int at, RecordFormat.Parts p) {
        int k = count++;
        rec[k] = at;
        bodyOff[k] = p.bodyOff;
        bodyLen[k] = p.bodyLen;
        topicOff[k] = p.topicOff;
        topicLen[k] = p.topicLen;
        propsOff[k] = p.propsOff;
        propsLen[k] = p.propsLen;
    }

    int sysFlag(int row) {
        return RecordFormat.i32(data, rec[row] + RecordFormat.SYSFLAG_POS);
    }

    long commitLogOffset(int row) {
        return base + rec[row];
    }

    /** Every row's properties, split once per batch when a properties, tags or keys column asks. */
    PropertyIndex properties() {
        if (properties == null) {
            properties = new PropertyIndex(this);
        }
        return properties;
    }

    /**
     * MessageDecoder.string2messageProperties of each row: items split at 0x02, name and value at
     * the first 0x01, both non-empty; a name given again replaces its earlier value in place (a
     * Java HashMap keeps one entry per name), as the Cython kernel's {@code _split_properties}.
     */
    static final class PropertyIndex {
        final int[] entryStart;
        int[] keyOff = new int[64];
        int[] keyLen = new int[64];
        int[] valOff = new int[64];
        int[] valLen = new int[64];
        final int[] tagsOff;
        final int[] tagsLen;
        final int[] keysOff;
        final int[] keysLen;
        private int m;

        PropertyIndex(RecordRows rows) {
            int n = rows.count;
            byte[] q = rows.data;
            entryStart = new int[n + 1];
            tagsOff = new int[n];
            tagsLen = new int[n];
            keysOff = new int[n];
            keysLen = new int[n];
            for (int k = 0; k < n; k++) {
                entryStart[k] = m;
                split(q, rows.propsOff[k], rows.propsLen[k]);
                tagsOff[k] = -1;
                keysOff[k] = -1;
                for (int j = entryStart[k]; j < m; j++) {
                    if (keyLen[j] == 4 && is(q, keyOff[j], 'T', 'A', 'G', 'S')) {
                        tagsOff[k] = valOff[j];
                        tagsLen[k] = valLen[j];
                    } else if (keyLen[j] == 4 && is(q, keyOff[j], 'K', 'E', 'Y', 'S')) {
                        keysOff[k] = valOff[j];
                        keysLen[k] = valLen[j];
                    }
                }
            }
            entryStart[n] = m;
        }

        private static boolean is(byte[] q, int at, char a, char b, char c, char d) {
            return q[at] == a && q[at + 1] == b && q[at + 2] == c && q[at + 3] == d;
        }

        private void split(byte[] q, int from, int len) {
            int first = m;
            int item = from;
            int sep = -1;
            int end = from + len;
            for (int i = from; i <= end; i++) {
                if (i == end || q[i] == 2) {
                    if (sep > item && sep < i - 1) {
                        put(q, first, item, sep, i);
                    }
                    item = i + 1;
                    sep = -1;
                } else if (q[i] == 1 && sep < 0) {
                    sep = i;
                }
            }
        }

        private void put(byte[] q, int first, int item, int sep, int end) {
            int nameLen = sep - item;
            for (int j = first; j < m; j++) {
                if (keyLen[j] == nameLen
                        && Arrays.equals(q, keyOff[j], keyOff[j] + nameLen, q, item, item + nameLen)) {
                    valOff[j] = sep + 1;
                    valLen[j] = end - sep - 1;
                    return;
                }
            }
            if (m == keyOff.length) {
                keyOff = Arrays.copyOf(keyOff, 2 * m);
                keyLen = Arrays.copyOf(keyLen, 2 * m);
                valOff = Arrays.copyOf(valOff, 2 * m);
                valLen = Arrays.copyOf(valLen, 2 * m);
            }
            keyOff[m] = item;
            keyLen[m] = nameLen;
            valOff[m] = sep + 1;
            valLen[m] = end - sep - 1;
            m++;
        }
    }
}
