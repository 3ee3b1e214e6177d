// Compiled and run by test_pgjdbc.py against Postgres and against the query server: the
// DatabaseMetaData calls that read pg_settings (getImportedKeys, getExportedKeys,
// getIndexInfo) and the ones listing tables, columns and primary keys. One line per check.
import java.sql.*;
import java.util.*;

public class JdbcKeysProbe {
    static String rows(ResultSet rs, String... columns) throws SQLException {
        List<String> out = new ArrayList<>();
        while (rs.next()) {
            List<String> values = new ArrayList<>();
            for (String c : columns) values.add(String.valueOf(rs.getString(c)));
            out.add(String.join(":", values));
        }
        rs.close();
        return String.join(",", out);
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("sslmode", "disable");
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            DatabaseMetaData meta = conn.getMetaData();
            System.out.println("tables=" + rows(meta.getTables(null, "sales", "%", new String[] {"TABLE"}),
                "TABLE_SCHEM", "TABLE_NAME", "TABLE_TYPE"));
            System.out.println("columns=" + rows(meta.getColumns(null, "sales", "order_lines", "%"),
                "COLUMN_NAME", "TYPE_NAME", "DATA_TYPE", "NULLABLE", "ORDINAL_POSITION"));
            System.out.println("primary_keys=" + rows(meta.getPrimaryKeys(null, "sales", "order_lines"),
                "COLUMN_NAME", "KEY_SEQ", "PK_NAME"));
            for (String table : new String[] {"order_lines", "customers"}) {
                System.out.println("imported_" + table + "=" + rows(meta.getImportedKeys(null, "sales", table),
                    "PKTABLE_NAME", "PKCOLUMN_NAME", "FKTABLE_NAME", "FKCOLUMN_NAME", "KEY_SEQ"));
                System.out.println("exported_" + table + "=" + rows(meta.getExportedKeys(null, "sales", table),
                    "PKTABLE_NAME", "PKCOLUMN_NAME", "FKTABLE_NAME", "FKCOLUMN_NAME", "KEY_SEQ"));
            }
            System.out.println("indexes=" + rows(meta.getIndexInfo(null, "sales", "order_lines", false, true),
                "INDEX_NAME", "COLUMN_NAME", "NON_UNIQUE", "ORDINAL_POSITION"));
            System.out.println("max_name=" + meta.getMaxColumnNameLength());
        }
    }
}
