// Compiled and run by test_jdbc.py: pgjdbc against the streambed query server.
// Prints one "key=value" line per check; the test compares them.
import java.sql.*;
import java.util.*;

public class JdbcProbe {
    public static void main(String[] args) throws Exception {
        String url = args[0];
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        props.setProperty("sslmode", "disable");
        try (Connection conn = DriverManager.getConnection(url, props)) {
            DatabaseMetaData meta = conn.getMetaData();
            System.out.println("product=" + meta.getDatabaseProductName() + " " + meta.getDatabaseProductVersion());
            List<String> tables = new ArrayList<>();
            try (ResultSet rs = meta.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) tables.add(rs.getString("TABLE_SCHEM") + "." + rs.getString("TABLE_NAME"));
            }
            System.out.println("tables=" + String.join(",", tables));
            List<String> columns = new ArrayList<>();
            try (ResultSet rs = meta.getColumns(null, "public", "items", "%")) {
                while (rs.next()) columns.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME"));
            }
            System.out.println("columns=" + String.join(",", columns));
            List<String> keys = new ArrayList<>();
            try (ResultSet rs = meta.getPrimaryKeys(null, "public", "items")) {
                while (rs.next()) keys.add(rs.getString("COLUMN_NAME"));
                System.out.println("primary_key=" + String.join(",", keys));
            } catch (SQLException e) {
                System.out.println("primary_key_error=" + e.getSQLState() + " " + e.getMessage().split("\n")[0]);
            }
            // DBeaver's table properties: the indexes (the primary key's index, if any).
            List<String> indexes = new ArrayList<>();
            try (ResultSet rs = meta.getIndexInfo(null, "public", "items", false, true)) {
                while (rs.next()) {
                    indexes.add(rs.getString("INDEX_NAME") + ":" + rs.getString("COLUMN_NAME") + ":"
                        + rs.getBoolean("NON_UNIQUE") + ":" + rs.getShort("ORDINAL_POSITION"));
                }
                System.out.println("indexes=" + String.join(",", indexes));
            } catch (SQLException e) {
                System.out.println("indexes_error=" + e.getSQLState() + " " + e.getMessage().split("\n")[0]);
            }
            // What DBeaver and Metabase call right after connecting.
            List<String> schemas = new ArrayList<>();
            try (ResultSet rs = meta.getSchemas()) {
                while (rs.next()) schemas.add(rs.getString("TABLE_SCHEM"));
            }
            System.out.println("schemas=" + String.join(",", schemas));
            List<String> types = new ArrayList<>();
            try (ResultSet rs = meta.getTypeInfo()) {
                while (rs.next()) types.add(rs.getString("TYPE_NAME") + ":" + rs.getInt("DATA_TYPE"));
            }
            System.out.println("types=" + String.join(",", types));
            List<String> catalogs = new ArrayList<>();
            try (ResultSet rs = meta.getCatalogs()) {
                while (rs.next()) catalogs.add(rs.getString("TABLE_CAT"));
            }
            System.out.println("catalogs=" + String.join(",", catalogs));
            // Prepared statement, run enough times to switch pgjdbc to a named server-side statement.
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT id, name, price, day, created_at FROM public.items WHERE id = ? AND day >= ?")) {
                for (int i = 1; i <= 6; i++) {
                    ps.setLong(1, i);
                    ps.setDate(2, java.sql.Date.valueOf("2024-01-01"));
                    try (ResultSet rs = ps.executeQuery()) {
                        rs.next();
                        if (i == 6) {
                            System.out.println("row=" + rs.getLong(1) + "|" + rs.getString(2) + "|"
                                + rs.getBigDecimal(3) + "|" + rs.getDate(4) + "|"
                                + rs.getTimestamp(5).toInstant());
                        }
                    }
                }
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT count(*) AS count FROM public.items WHERE name = ?")) {
                ps.setString(1, "item 5");
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    System.out.println("count_label=" + rs.getMetaData().getColumnLabel(1) + " count=" + rs.getLong(1));
                }
            }
            // Fetch size inside a transaction: Execute with max rows, PortalSuspended, resume.
            conn.setAutoCommit(false);
            try (Statement st = conn.createStatement()) {
                st.setFetchSize(100);
                long total = 0, sum = 0;
                try (ResultSet rs = st.executeQuery("SELECT id FROM public.items ORDER BY id")) {
                    while (rs.next()) { total++; sum += rs.getLong(1); }
                }
                System.out.println("fetched=" + total + " sum=" + sum);
            }
            conn.commit();
            conn.setAutoCommit(true);
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT * FROM nope");
            } catch (SQLException e) {
                System.out.println("error_state=" + e.getSQLState());
            }
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT 1")) {
                rs.next();
                System.out.println("after_error=" + rs.getInt(1));
            }
        }
    }
}
