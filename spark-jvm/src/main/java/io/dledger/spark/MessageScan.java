package io.dledger.spark;

import java.io.File;
import java.io.IOException;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The scan of a classic commit log: each file (named by its start offset) one partition, or
 * pieces of about {@code maxPartitionBytes} cut at record starts, so that the cores share a log
 * of few large files (1 GiB by default).
 */
final class MessageScan implements Scan, Batch {
    private final String root;
    private final StructType schema;
    private final RowFilter filter;
    private final int batchRows;
    private final String description;
    private final long maxPartitionBytes;

    MessageScan(String root, StructType schema, RowFilter filter, int batchRows, long maxPartitionBytes,
            String description) {
        this.maxPartitionBytes = maxPartitionBytes;
        this.root = root;
        this.schema = schema;
        this.filter = filter;
        this.batchRows = batchRows;
        this.description = description;
    }

    @Override
    public StructType readSchema() {
        return schema;
    }

    @Override
    public String description() {
        return "rocketmq-jvm " + root + " " + schema.simpleString() + description;
    }

    @Override
    public Batch toBatch() {
        return this;
    }

    /** The commit-log files, in offset order. */
    static List<File> commitLogFiles(String root) {
        File[] files = new File(root, "commitlog").listFiles(f -> f.isFile() && f.getName().matches("[0-9]{20}"));
        List<File> out = new ArrayList<>(Arrays.asList(files == null ? new File[0] : files));
        out.sort(Comparator.comparingLong(f -> Long.parseLong(f.getName())));
        return out;
    }

    @Override
    public InputPartition[] planInputPartitions() {
        List<InputPartition> out = new ArrayList<>();
        List<File> files = commitLogFiles(root);
        // MappedFileQueue.load refuses a log whose files are not all of one size (one cut short).
        java.util.TreeSet<Long> sizes = new java.util.TreeSet<>();
        for (File f : files) {
            sizes.add(f.length());
        }
        if (sizes.size() > 1) {
            throw new IllegalStateException(new File(root, "commitlog") + ": commit-log files of mixed sizes " + sizes);
        }
        for (File f : files) {
            long base = Long.parseLong(f.getName());
            long prev = 0;
            for (long cut : cuts(f, maxPartitionBytes)) {
                out.add(new CommitLogPartition(f.getPath(), base, base + prev, base + cut));
                prev = cut;
            }
        }
        return out.toArray(new InputPartition[0]);
    }

    /**
     * Where {@code file} is cut into pieces of about {@code piece} bytes: at record starts, found
     * by hopping from record to record by their sizes (a record never crosses a file, and only a
     * walk from the file's start knows where records start). The last cut is the file's length;
     * the hop stops at the first thing that is not a record (the reader of that piece finds it).
     */
    static List<Long> cuts(File file, long piece) {
        long length = file.length();
        List<Long> out = new ArrayList<>();
        if (piece > 0 && length > piece) {
            try (FileChannel ch = FileChannel.open(file.toPath(), StandardOpenOption.READ)) {
                MappedByteBuffer map = ch.map(FileChannel.MapMode.READ_ONLY, 0, length);
                long pos = 0;
                long next = piece;
                while (next < length && pos + 8 <= length) {
                    int size = map.getInt((int) pos);
                    if (size < RecordFormat.MIN_RECORD || map.getInt((int) pos + 4) != RecordFormat.MESSAGE_MAGIC_CODE) {
                        break;
                    }
                    pos += size;
                    if (pos >= next && pos < length) {
                        out.add(pos);
                        next = pos + piece;
                    }
                }
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
        out.add(length);
        return out;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
        return new ReaderFactory(MessageColumns.names(schema), filter, batchRows);
    }

    static final class ReaderFactory implements PartitionReaderFactory {
        private static final long serialVersionUID = 1L;
        private final ArrayList<String> columns;
        private final RowFilter filter;
        private final int batchRows;

        ReaderFactory(List<String> columns, RowFilter filter, int batchRows) {
            this.columns = new ArrayList<>(columns);
            this.filter = filter;
            this.batchRows = batchRows;
        }

        @Override
        public boolean supportColumnarReads(InputPartition partition) {
            return true;
        }

        @Override
        public PartitionReader<InternalRow> createReader(InputPartition partition) {
            throw new UnsupportedOperationException("rocketmq-jvm reads columnar batches only");
        }

        @Override
        public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
            try {
                return new CommitLogReader((CommitLogPartition) partition, columns, filter, batchRows);
            } catch (IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
    }
}
