package io.dledger.spark;

import org.apache.spark.sql.connector.read.InputPartition;

/** One commit-log file, or the part {@code [start, end)} of it cut at record starts. */
final class CommitLogPartition implements InputPartition {
    private static final long serialVersionUID = 1L;

    final String path;
    /** Commit-log offset of the file's first byte (its name). */
    final long base;
    final long start;
    final long end;

    CommitLogPartition(String path, long base, long start, long end) {
        this.path = path;
        this.base = base;
        this.start = start;
        this.end = end;
    }

    @Override
    public String toString() {
        return "CommitLogPartition(" + path + " [" + start + ", " + end + "))";
    }
}
