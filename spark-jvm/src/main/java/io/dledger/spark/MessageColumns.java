package io.dledger.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The columns of a message, as the Python {@code rocketmq} format names and types them
 * ({@code dledger.spark.rocketmq_source.SPARK_TYPES}): a user switches format name and nothing else.
 */
final class MessageColumns {
    private MessageColumns() {}

    static final Map<String, DataType> TYPES = new LinkedHashMap<>();

    static {
        TYPES.put("topic", DataTypes.StringType);
        TYPES.put("queue_id", DataTypes.IntegerType);
        TYPES.put("queue_offset", DataTypes.LongType);
        TYPES.put("commit_log_offset", DataTypes.LongType);
        TYPES.put("size", DataTypes.IntegerType);
        TYPES.put("msg_id", DataTypes.StringType);
        TYPES.put("tags", DataTypes.StringType);
        TYPES.put("keys", DataTypes.StringType);
        TYPES.put("properties", DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType, false));
        TYPES.put("body", DataTypes.BinaryType);
        TYPES.put("body_crc", DataTypes.IntegerType);
        TYPES.put("flag", DataTypes.IntegerType);
        TYPES.put("sys_flag", DataTypes.IntegerType);
        TYPES.put("born_timestamp", DataTypes.TimestampType);
        TYPES.put("store_timestamp", DataTypes.TimestampType);
        TYPES.put("born_host", DataTypes.StringType);
        TYPES.put("store_host", DataTypes.StringType);
        TYPES.put("reconsume_times", DataTypes.IntegerType);
        TYPES.put("prepared_transaction_offset", DataTypes.LongType);
    }

    /** Absent tags or keys are null; everything else always has a value. */
    static boolean nullable(String name) {
        return name.equals("tags") || name.equals("keys");
    }

    static StructType schema(List<String> columns) {
        List<StructField> fields = new ArrayList<>();
        for (String c : columns) {
            fields.add(DataTypes.createStructField(c, TYPES.get(c), nullable(c)));
        }
        return DataTypes.createStructType(fields);
    }

    static StructType all() {
        return schema(new ArrayList<>(TYPES.keySet()));
    }

    /** The columns named by the {@code columns} option (comma-separated), checked. */
    static List<String> parse(String raw) {
        if (raw == null || raw.isBlank()) {
            return new ArrayList<>(TYPES.keySet());
        }
        List<String> out = new ArrayList<>();
        List<String> unknown = new ArrayList<>();
        for (String c : raw.split(",")) {
            String name = c.strip();
            if (name.isEmpty() || out.contains(name)) {
                continue;
            }
            if (!TYPES.containsKey(name)) {
                unknown.add(name);
            }
            out.add(name);
        }
        if (!unknown.isEmpty()) {
            throw new IllegalArgumentException("option columns: unknown column(s) " + String.join(", ", unknown)
                    + "; columns are " + String.join(", ", TYPES.keySet()));
        }
        return out;
    }

    /** A schema given with {@code .schema(...)}: its columns must be message columns of their type. */
    static void check(StructType schema) {
        for (StructField f : schema.fields()) {
            DataType want = TYPES.get(f.name());
            if (want == null) {
                throw new IllegalArgumentException("unknown column " + f.name() + "; columns are "
                        + String.join(", ", TYPES.keySet()));
            }
            if (!want.sameType(f.dataType())) {
                throw new IllegalArgumentException("column " + f.name() + " is " + want.simpleString() + ", not "
                        + f.dataType().simpleString());
            }
        }
    }

    static List<String> names(StructType schema) {
        return Arrays.asList(schema.fieldNames());
    }
}
