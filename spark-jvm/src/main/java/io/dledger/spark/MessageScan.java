package io.dledger.spark;

import java.io.File;
import java.io.IOException;
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

/** The scan of a classic commit log: one partition per file (named by its start offset). */
final class MessageScan implements Scan, Batch {
    private final String root;
    private final StructType schema;
    private final RowFilter filter;
    private final int batchRows;
    private final String description;

    MessageScan(String root, StructType schema, RowFilter filter, int batchRows, String description) {
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
            out.add(new CommitLogPartition(f.getPath(), base, base, base + f.length()));
        }
        return out.toArray(new InputPartition[0]);
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
