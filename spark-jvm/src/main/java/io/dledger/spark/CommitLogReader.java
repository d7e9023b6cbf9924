package io.dledger.spark;

import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.List;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Walks one commit-log file as ReputMessageService does, from its start to a BLANK_MAGIC_CODE
 * record or unwritten (zero) bytes, in batches of at most {@code batchRows} records. A record that
 * is not whole and valid ends the walk of this file with an error in the log, where the Python
 * format stops too. The file is copied in windows of {@link #WINDOW} bytes (more when one record is
 * larger); a batch's vectors are views of its window.
 */
final class CommitLogReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger(CommitLogReader.class);
    static final int WINDOW = 8 << 20;

    private final CommitLogPartition part;
    private final RowFilter filter;
    private final int batchRows;
    private final FileChannel channel;
    private final long fileEnd;
    private final RecordRows rows;
    private final ColumnarBatch batch;
    private final RecordFormat.Parts parts = new RecordFormat.Parts();
    private byte[] window = new byte[0];
    private MappedByteBuffer map;
    private long mapPos;
    /** File position of window[0], bytes valid in the window, and the walk's place in it. */
    private long windowPos;
    private int windowLen;
    private int cursor;
    private boolean over;

    CommitLogReader(CommitLogPartition part, List<String> columns, RowFilter filter, int batchRows)
            throws IOException {
        this.part = part;
        this.filter = filter.isEmpty() ? null : filter;
        this.batchRows = batchRows;
        this.channel = FileChannel.open(Paths.get(part.path), StandardOpenOption.READ);
        this.fileEnd = Math.min(channel.size(), part.end - part.base);
        this.rows = new RecordRows(batchRows);
        ColumnVector[] vectors = new ColumnVector[columns.size()];
        for (int i = 0; i < vectors.length; i++) {
            vectors[i] = RecordVectors.of(columns.get(i), rows);
        }
        this.batch = new ColumnarBatch(vectors);
        this.windowPos = part.start - part.base;
    }

    /**
     * Copies the window from {@code pos}, at least {@code need} bytes when the file has them, out
     * of a read-only mapping of the file: one copy (FileChannel.read into a heap buffer copies
     * twice, through a direct buffer).
     */
    private void fill(long pos, int need) throws IOException {
        int len = (int) Math.min(Math.max(WINDOW, need), fileEnd - pos);
        if (window.length < len) {
            window = new byte[Math.max(len, (int) Math.min(WINDOW, fileEnd - pos))];
        }
        if (map == null || pos < mapPos || pos + len > mapPos + map.capacity()) {
            // The whole file where it fits one mapping (commit-log files are 1 GiB by default).
            mapPos = fileEnd <= Integer.MAX_VALUE ? 0 : pos;
            long mapLen = fileEnd <= Integer.MAX_VALUE ? fileEnd : Math.min(fileEnd - pos, Integer.MAX_VALUE);
            map = channel.map(FileChannel.MapMode.READ_ONLY, mapPos, mapLen);
        }
        map.get((int) (pos - mapPos), window, 0, len);
        windowPos = pos;
        windowLen = len;
        cursor = 0;
    }

    @Override
    public boolean next() throws IOException {
        while (!over) {
            if (cursor >= windowLen || windowLen == 0) {
                long pos = windowPos + cursor;
                if (pos >= fileEnd) {
                    over = true;
                    break;
                }
                fill(pos, 0);
            }
            rows.reset(window, part.base + windowPos);
            walk();
            if (rows.count > 0) {
                batch.setNumRows(rows.count);
                return true;
            }
        }
        return false;
    }

    /** Adds the records from the cursor to the batch, until it is full, the window ends or the file does. */
    private void walk() throws IOException {
        byte[] d = window;
        while (rows.count < batchRows) {
            int avail = windowLen - cursor;
            if (avail == 0) {
                return; // the next call reads on
            }
            boolean more = windowPos + windowLen < fileEnd;
            int code = RecordFormat.parse(d, cursor, avail, more, parts);
            if (code == RecordFormat.OK) {
                if (filter == null || filter.keeps(d, cursor, parts)) {
                    rows.add(cursor, parts);
                }
                cursor += parts.size;
                continue;
            }
            if (code == RecordFormat.SHORT) {
                if (rows.count > 0) {
                    return; // hand this batch over; the next window starts at this record
                }
                int need = avail >= 4 ? Math.max(RecordFormat.i32(d, cursor), 8) : 8;
                fill(windowPos + cursor, need);
                d = window;
                rows.reset(window, part.base + windowPos);
                continue;
            }
            if (code == RecordFormat.BAD) {
                LOG.error("commit log {}: bad record at {}; the walk of this file stops there", part.path,
                        part.base + windowPos + cursor);
            }
            over = true; // BLANK, ZERO: the rest of the file holds no record
            windowLen = cursor;
            return;
        }
    }

    @Override
    public ColumnarBatch get() {
        return batch;
    }

    @Override
    public void close() throws IOException {
        channel.close();
    }
}
