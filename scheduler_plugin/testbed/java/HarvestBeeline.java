// beeline's command line for the test cluster's HiveServer2, over Hive's own JDBC driver.
//
// hive-beeline 4.1.0 is not served by the registry here, so `harvest hadoop up --hive` compiles this
// against hive-jdbc-4.1.0-standalone.jar and writes D/bin/beeline to run it. It takes the arguments
// `harvest hive` (scheduler_plugin/hive.py) gives beeline:
//
//   beeline -u URL [-n USER] [-p PASSWORD] [--hiveconf K=V]... [--outputformat=tsv2|table]
//           [--showHeader=false] [--silent=true] [--force=true] (-f FILE | -e SQL)
//
// Rows go to stdout (tab-separated; NULL for null). Tez's vertex table goes to stderr when a
// statement ends, one row per vertex as beeline's in-place progress prints it:
//   "Map 1 .......... container SUCCEEDED 12 12 0 0 0 0" (TOTAL COMPLETED RUNNING PENDING FAILED KILLED).
// Exit code: 0, or 2 when a statement failed (the error on stderr); --force=true goes on after errors.
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.apache.hive.jdbc.HiveStatement;
import org.apache.hive.jdbc.logs.InPlaceUpdateStream;
import org.apache.hive.service.rpc.thrift.TProgressUpdateResp;

public final class HarvestBeeline {
  private HarvestBeeline() {}

  /** Keeps the last progress table the server sent for the running statement. */
  static final class LastProgress implements InPlaceUpdateStream {
    private final EventNotifier notifier = new EventNotifier();
    volatile TProgressUpdateResp last;

    @Override public void update(TProgressUpdateResp response) { last = response; }

    @Override public EventNotifier getEventNotifier() { return notifier; }
  }

  /** Statements of a script: split on ';' outside quotes and comments. */
  static List<String> statements(String sql) {
    List<String> out = new ArrayList<>();
    StringBuilder cur = new StringBuilder();
    char quote = 0;
    for (int i = 0; i < sql.length(); i++) {
      char c = sql.charAt(i);
      if (quote == 0 && c == '-' && i + 1 < sql.length() && sql.charAt(i + 1) == '-') {
        while (i < sql.length() && sql.charAt(i) != '\n') { i++; }
        cur.append('\n');
        continue;
      }
      if (quote != 0) {
        if (c == quote) { quote = 0; }
      } else if (c == '\'' || c == '"' || c == '`') {
        quote = c;
      } else if (c == ';') {
        if (cur.toString().trim().length() > 0) { out.add(cur.toString().trim()); }
        cur.setLength(0);
        continue;
      }
      cur.append(c);
    }
    if (cur.toString().trim().length() > 0) { out.add(cur.toString().trim()); }
    return out;
  }

  private static void printProgress(TProgressUpdateResp p) {
    if (p == null || p.getRows() == null) { return; }
    for (List<String> row : p.getRows()) {
      if (row.isEmpty()) { continue; }
      StringBuilder line = new StringBuilder(row.get(0));  // "Map 1 .........." (the name and its dots)
      for (int i = 1; i < row.size(); i++) { line.append(' ').append(row.get(i)); }
      System.err.println(line);
    }
  }

  public static void main(String[] args) throws Exception {
    String url = null, user = "", password = "", file = null, inline = null;
    boolean header = true, force = false, silent = false;
    Map<String, String> hiveconf = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      String a = args[i];
      if (a.equals("-u")) { url = args[++i]; }
      else if (a.equals("-n")) { user = args[++i]; }
      else if (a.equals("-p")) { password = args[++i]; }
      else if (a.equals("-f")) { file = args[++i]; }
      else if (a.equals("-e")) { inline = args[++i]; }
      else if (a.equals("--hiveconf")) {
        String kv = args[++i];
        int eq = kv.indexOf('=');
        if (eq < 1) { System.err.println("beeline: --hiveconf expects K=V, got " + kv); System.exit(1); }
        hiveconf.put(kv.substring(0, eq), kv.substring(eq + 1));
      }
      else if (a.startsWith("--showHeader=")) { header = Boolean.parseBoolean(a.substring(13)); }
      else if (a.startsWith("--force=")) { force = Boolean.parseBoolean(a.substring(8)); }
      else if (a.startsWith("--silent=")) { silent = Boolean.parseBoolean(a.substring(9)); }
      else if (a.startsWith("--outputformat=")) { /* tsv2 and table both print tab-separated rows */ }
      else { System.err.println("beeline: unknown argument " + a); System.exit(1); }
    }
    if (url == null || (file == null) == (inline == null)) {
      System.err.println("usage: beeline -u URL [--hiveconf K=V]... (-f FILE | -e SQL)");
      System.exit(1);
    }
    String sql = inline != null ? inline : new String(Files.readAllBytes(Paths.get(file)), StandardCharsets.UTF_8);
    // jdbc:hive2://host:port/db;sess_vars?hive_conf_list#hive_var_list
    if (!hiveconf.isEmpty()) {
      StringBuilder conf = new StringBuilder();
      for (Map.Entry<String, String> e : hiveconf.entrySet()) {
        conf.append(conf.length() == 0 ? "" : ";").append(e.getKey()).append('=').append(e.getValue());
      }
      url = url + (url.contains("?") ? ";" : "?") + conf;
    }
    int failed = 0;
    try (Connection conn = DriverManager.getConnection(url, user, password)) {
      for (String st : statements(sql)) {
        try (Statement stmt = conn.createStatement()) {
          LastProgress progress = new LastProgress();
          ((HiveStatement) stmt).setInPlaceUpdateStream(progress);
          long started = System.nanoTime();
          boolean rows = stmt.execute(st);
          printProgress(progress.last);
          if (rows) {
            try (ResultSet rs = stmt.getResultSet()) {
              ResultSetMetaData md = rs.getMetaData();
              int n = md.getColumnCount();
              if (header) {
                StringBuilder h = new StringBuilder();
                for (int c = 1; c <= n; c++) { h.append(c > 1 ? "\t" : "").append(md.getColumnLabel(c)); }
                System.out.println(h);
              }
              while (rs.next()) {
                StringBuilder r = new StringBuilder();
                for (int c = 1; c <= n; c++) {
                  String v = rs.getString(c);
                  r.append(c > 1 ? "\t" : "").append(v == null ? "NULL" : v);
                }
                System.out.println(r);
              }
            }
          }
          if (!silent) {
            System.err.printf("OK (%.3f seconds)%n", (System.nanoTime() - started) / 1e9);
          }
        } catch (SQLException e) {
          failed++;
          System.err.println("Error: " + e.getMessage() + " (state=" + e.getSQLState() + ",code=" + e.getErrorCode() + ")");
          if (!force) { break; }
        }
        System.out.flush();
      }
    } catch (SQLException e) {
      System.err.println("Error: could not connect to " + url + ": " + e.getMessage());
      System.exit(2);
    }
    System.exit(failed == 0 ? 0 : 2);
  }
}
