package io.dledger.spark;

import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;
import org.apache.spark.sql.types.StructType;

/**
 * Column pruning (only the columns the query reads are made) and filter pushdown: comparisons,
 * equality and IN lists on topic, queue_id, queue_offset and store_timestamp are applied exactly
 * during the walk and taken from Spark; any other filter stays with Spark.
 */
final class MessageScanBuilder implements ScanBuilder, SupportsPushDownRequiredColumns, SupportsPushDownFilters {
    private final String root;
    private final int batchRows;
    private final long maxPartitionBytes;
    private StructType schema;
    private final RowFilter filter = new RowFilter();
    private Filter[] pushed = new Filter[0];

    MessageScanBuilder(String root, StructType schema, int batchRows, long maxPartitionBytes) {
        this.root = root;
        this.maxPartitionBytes = maxPartitionBytes;
        this.schema = schema;
        this.batchRows = batchRows;
    }

    @Override
    public void pruneColumns(StructType required) {
        this.schema = required;
    }

    @Override
    public Filter[] pushFilters(Filter[] filters) {
        List<Filter> kept = new ArrayList<>();
        List<Filter> taken = new ArrayList<>();
        for (Filter f : filters) {
            (absorb(f) ? taken : kept).add(f);
        }
        pushed = taken.toArray(new Filter[0]);
        return kept.toArray(new Filter[0]);
    }

    @Override
    public Filter[] pushedFilters() {
        return pushed.clone();
    }

    @Override
    public Scan build() {
        StringBuilder sb = new StringBuilder();
        if (pushed.length > 0) {
            sb.append(" pushed ");
            for (Filter f : pushed) {
                sb.append(f).append(' ');
            }
        }
        return new MessageScan(root, schema, filter, batchRows, maxPartitionBytes, sb.toString());
    }

    private boolean absorb(Filter f) {
        String[] refs = f.references();
        if (refs.length != 1) {
            return false;
        }
        String column = refs[0];
        if (f instanceof IsNotNull) {
            // Only tags and keys can be null.
            return column.equals("topic") || column.equals("queue_id") || column.equals("queue_offset")
                    || column.equals("store_timestamp");
        }
        switch (column) {
            case "topic":
                return absorbTopic(f);
            case "queue_id":
                return absorbQueueId(f);
            case "queue_offset":
                return absorbRange(f, false);
            case "store_timestamp":
                return absorbRange(f, true);
            default:
                return false;
        }
    }

    /** The values an equality or IN filter keeps; null for any other filter. */
    private static Object[] equalityValues(Filter f) {
        if (f instanceof EqualTo) {
            return new Object[] {((EqualTo) f).value()};
        } else if (f instanceof EqualNullSafe) {
            return new Object[] {((EqualNullSafe) f).value()};
        } else if (f instanceof In) {
            return ((In) f).values();
        }
        return null;
    }

    private boolean absorbTopic(Filter f) {
        List<String> values = new ArrayList<>();
        Object[] given = equalityValues(f);
        if (given == null) {
            return false;
        }
        for (Object v : given) {
            if (v instanceof String) {
                values.add((String) v);
            } else if (v != null) {
                return false;
            }
        }
        filter.keepTopics(values);
        return true;
    }

    private boolean absorbQueueId(Filter f) {
        Object[] given = equalityValues(f);
        if (given != null) {
            List<Integer> ids = new ArrayList<>();
            for (Object v : given) {
                if (v instanceof Integer) {
                    ids.add((Integer) v);
                } else if (v != null) {
                    return false;
                }
            }
            filter.keepQueueIds(ids);
            return true;
        }
        Long[] lohi = bounds(f, false);
        if (lohi == null) {
            return false;
        }
        if (lohi[0] != null) {
            filter.queueIdMin = Math.max(filter.queueIdMin, lohi[0]);
        }
        if (lohi[1] != null) {
            filter.queueIdMax = Math.min(filter.queueIdMax, lohi[1]);
        }
        return true;
    }

    private boolean absorbRange(Filter f, boolean timestamp) {
        if (f instanceof EqualTo || f instanceof EqualNullSafe) {
            Object v = f instanceof EqualTo ? ((EqualTo) f).value() : ((EqualNullSafe) f).value();
            Long at = number(v, timestamp);
            if (at == null) {
                return false;
            }
            narrow(timestamp, at, at);
            return true;
        }
        Long[] lohi = bounds(f, timestamp);
        if (lohi == null) {
            return false;
        }
        narrow(timestamp, lohi[0], lohi[1]);
        return true;
    }

    private void narrow(boolean timestamp, Long lo, Long hi) {
        if (timestamp) {
            filter.storeMicrosMin = lo == null ? filter.storeMicrosMin : Math.max(filter.storeMicrosMin, lo);
            filter.storeMicrosMax = hi == null ? filter.storeMicrosMax : Math.min(filter.storeMicrosMax, hi);
        } else {
            filter.queueOffsetMin = lo == null ? filter.queueOffsetMin : Math.max(filter.queueOffsetMin, lo);
            filter.queueOffsetMax = hi == null ? filter.queueOffsetMax : Math.min(filter.queueOffsetMax, hi);
        }
    }

    /** Inclusive [lo, hi] (either null: open) of a comparison, or null when it is not one we apply. */
    private static Long[] bounds(Filter f, boolean timestamp) {
        if (f instanceof GreaterThan) {
            Long v = number(((GreaterThan) f).value(), timestamp);
            return v == null || v == Long.MAX_VALUE ? null : new Long[] {v + 1, null};
        }
        if (f instanceof GreaterThanOrEqual) {
            Long v = number(((GreaterThanOrEqual) f).value(), timestamp);
            return v == null ? null : new Long[] {v, null};
        }
        if (f instanceof LessThan) {
            Long v = number(((LessThan) f).value(), timestamp);
            return v == null || v == Long.MIN_VALUE ? null : new Long[] {null, v - 1};
        }
        if (f instanceof LessThanOrEqual) {
            Long v = number(((LessThanOrEqual) f).value(), timestamp);
            return v == null ? null : new Long[] {null, v};
        }
        return null;
    }

    /** A literal as a long (a timestamp in microseconds since the epoch), or null. */
    private static Long number(Object v, boolean timestamp) {
        if (timestamp) {
            Instant at = null;
            if (v instanceof Timestamp) {
                at = ((Timestamp) v).toInstant();
            } else if (v instanceof Instant) {
                at = (Instant) v;
            }
            return at == null ? null : Math.addExact(Math.multiplyExact(at.getEpochSecond(), 1_000_000L),
                    at.getNano() / 1000);
        }
        if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) {
            return ((Number) v).longValue();
        }
        return null;
    }
}
