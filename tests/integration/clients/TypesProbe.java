// Compiled and run by test_jdbc.py against the source Postgres and the query server: what
// pgjdbc's DatabaseMetaData and ResultSetMetaData say of tables with foreign keys, NOT NULL
// and declared types. Prints one "key=value" line per check; the test compares them.
import java.sql.*;
import java.util.*;

public class TypesProbe {
    static String keys(ResultSet rs) throws SQLException {
        List<String> out = new ArrayList<>();
        while (rs.next()) {
            out.add(rs.getString("PKTABLE_SCHEM") + "." + rs.getString("PKTABLE_NAME") + "."
                + rs.getString("PKCOLUMN_NAME") + "<-" + rs.getString("FKTABLE_SCHEM") + "."
                + rs.getString("FKTABLE_NAME") + "." + rs.getString("FKCOLUMN_NAME") + ":"
                + rs.getShort("KEY_SEQ") + ":" + rs.getShort("UPDATE_RULE") + ":"
                + rs.getShort("DELETE_RULE") + ":" + rs.getString("FK_NAME") + ":"
                + rs.getString("PK_NAME") + ":" + rs.getShort("DEFERRABILITY"));
        }
        return String.join(",", out);
    }

    static void print(String key, Callable<String> what) {
        try {
            System.out.println(key + "=" + what.call());
        } catch (Exception e) {
            System.out.println(key + "=ERROR " + e.getMessage().split("\n")[0]);
        }
    }

    interface Callable<T> { T call() throws Exception; }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("sslmode", "disable");
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData meta = conn.getMetaData();
            print("imported", () -> keys(meta.getImportedKeys(null, "public", "orders")));
            print("exported", () -> keys(meta.getExportedKeys(null, "public", "customers")));
            print("cross", () -> keys(meta.getCrossReference(null, "public", "customers", null, "public", "orders")));
            for (String table : new String[] {"customers", "orders"}) {
                print("columns." + table, () -> {
                    List<String> out = new ArrayList<>();
                    try (ResultSet rs = meta.getColumns(null, "public", table, "%")) {
                        while (rs.next()) {
                            out.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME") + ":"
                                + rs.getInt("DATA_TYPE") + ":" + rs.getInt("COLUMN_SIZE") + ":"
                                + rs.getInt("DECIMAL_DIGITS") + ":" + rs.getInt("NULLABLE") + ":"
                                + rs.getString("IS_NULLABLE"));
                        }
                    }
                    return String.join(",", out);
                });
                print("primary_key." + table, () -> {
                    List<String> out = new ArrayList<>();
                    try (ResultSet rs = meta.getPrimaryKeys(null, "public", table)) {
                        while (rs.next()) out.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("PK_NAME"));
                    }
                    return String.join(",", out);
                });
            }
            String[] queries = {
                "SELECT * FROM customers ORDER BY id",
                "SELECT o.id, o.note, c.email, o.id + 1 AS next, c.tags FROM orders o JOIN customers c ON c.id = o.customer_id ORDER BY o.id",
            };
            for (int q = 0; q < queries.length; q++) {
                String sql = queries[q];
                print("described." + q, () -> {
                    List<String> out = new ArrayList<>();
                    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
                        ResultSetMetaData md = rs.getMetaData();
                        for (int i = 1; i <= md.getColumnCount(); i++) {
                            out.add(md.getColumnName(i) + ":" + md.getTableName(i) + ":" + md.getSchemaName(i) + ":"
                                + md.getColumnTypeName(i) + ":" + md.getColumnType(i) + ":" + md.isNullable(i) + ":"
                                + md.getPrecision(i) + ":" + md.getScale(i));
                        }
                    }
                    return String.join(",", out);
                });
                print("values." + q, () -> {
                    List<String> out = new ArrayList<>();
                    try (PreparedStatement st = conn.prepareStatement(sql)) {
                        for (int run = 0; run < 6; run++) {  // past prepareThreshold: binary results
                            out.clear();
                            try (ResultSet rs = st.executeQuery()) {
                                while (rs.next()) {
                                    for (int i = 1; i <= rs.getMetaData().getColumnCount(); i++) {
                                        Object value = rs.getObject(i);
                                        if (value instanceof java.sql.Array) {
                                            value = Arrays.toString((Object[]) ((java.sql.Array) value).getArray());
                                        }
                                        out.add(String.valueOf(value));
                                    }
                                }
                            }
                        }
                    }
                    return String.join("|", out);
                });
            }
        }
    }
}
