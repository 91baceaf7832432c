package org.harvest.hdfs;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * {@code POST <url>} with the block request as JSON and a bearer token, over plain
 * {@link HttpURLConnection} with tight connect and read timeouts (keep-alive reuses the
 * connection between blocks). Any failure is an IOException.
 */
public final class PlacementClient implements PlacementDecider.Service {
  private static final int MAX_ANSWER_BYTES = 64 * 1024;

  private final URL url;
  /** {@code .../v1/blocks/drop} next to {@code .../v1/blocks/place} (null when the URL ends otherwise). */
  private final URL dropUrl;
  private final String token;
  private final int connectTimeoutMs;
  private final int readTimeoutMs;

  public PlacementClient(String url, String token, int connectTimeoutMs, int readTimeoutMs) throws IOException {
    this.url = new URL(url);
    this.dropUrl = url.endsWith("/place") ? new URL(url.substring(0, url.length() - "/place".length()) + "/drop")
        : null;
    this.token = token == null ? "" : token.trim();
    this.connectTimeoutMs = connectTimeoutMs;
    this.readTimeoutMs = readTimeoutMs;
  }

  @Override
  public PlacementDecider.Answer choose(PlacementDecider.Request request) throws IOException {
    return parseAnswer(post(url, request.toJson()));
  }

  /** {@code POST .../v1/blocks/drop {"replicas": [...]}} -> {@code {"drop": host or null}}. */
  @Override
  public String chooseDrop(List<String> holders) throws IOException {
    if (dropUrl == null) {
      return null;
    }
    Object doc;
    try {
      doc = MiniJson.parse(post(dropUrl, "{\"replicas\":" + MiniJson.quoteAll(holders) + "}"));
    } catch (IllegalArgumentException ex) {
      throw new IOException("drop answer is not JSON: " + ex.getMessage());
    }
    Object drop = doc instanceof Map ? ((Map<?, ?>) doc).get("drop") : null;
    return drop instanceof String ? (String) drop : null;
  }

  private String post(URL target, String json) throws IOException {
    byte[] body = json.getBytes(StandardCharsets.UTF_8);
    HttpURLConnection conn = (HttpURLConnection) target.openConnection();
    try {
      conn.setConnectTimeout(connectTimeoutMs);
      conn.setReadTimeout(readTimeoutMs);
      conn.setRequestMethod("POST");
      conn.setDoOutput(true);
      conn.setUseCaches(false);
      conn.setRequestProperty("Content-Type", "application/json");
      if (!token.isEmpty()) {
        conn.setRequestProperty("Authorization", "Bearer " + token);
      }
      conn.setFixedLengthStreamingMode(body.length);
      OutputStream out = conn.getOutputStream();
      try {
        out.write(body);
      } finally {
        out.close();
      }
      int status = conn.getResponseCode();
      if (status != 200) {
        String detail = drain(conn.getErrorStream());
        String message = "HTTP " + status + " from " + target + ": " + detail;
        if (status >= 400 && status < 500) {
          throw new PlacementDecider.RejectedException(status, message);
        }
        throw new IOException(message);
      }
      // Reading the whole body returns the connection to the JDK's keep-alive pool.
      return read(conn.getInputStream());
    } catch (IOException ex) {
      conn.disconnect(); // never reuse a connection left in an unknown state
      throw ex;
    }
  }

  /** Parses {@code {"targets": [str...], "relaxed": bool, "reason": str, "short": bool}}. */
  static PlacementDecider.Answer parseAnswer(String text) throws IOException {
    Object doc;
    try {
      doc = MiniJson.parse(text);
    } catch (IllegalArgumentException ex) {
      throw new IOException("answer is not JSON: " + ex.getMessage());
    }
    if (!(doc instanceof Map)) {
      throw new IOException("answer is not a JSON object");
    }
    Map<?, ?> m = (Map<?, ?>) doc;
    Object rawTargets = m.get("targets");
    if (!(rawTargets instanceof List)) {
      throw new IOException("answer has no 'targets' list");
    }
    List<String> targets = new ArrayList<String>();
    for (Object t : (List<?>) rawTargets) {
      if (!(t instanceof String) || ((String) t).isEmpty()) {
        throw new IOException("'targets' must hold host names, got " + t);
      }
      targets.add((String) t);
    }
    Object relaxed = m.get("relaxed");
    Object reason = m.get("reason");
    return new PlacementDecider.Answer(targets, Boolean.TRUE.equals(relaxed),
        reason instanceof String ? (String) reason : "", Boolean.TRUE.equals(m.get("short")));
  }

  private static String read(InputStream in) throws IOException {
    if (in == null) {
      return "";
    }
    try {
      ByteArrayOutputStream buf = new ByteArrayOutputStream();
      byte[] chunk = new byte[4096];
      int n;
      while ((n = in.read(chunk)) != -1) {
        buf.write(chunk, 0, n);
        if (buf.size() > MAX_ANSWER_BYTES) {
          throw new IOException("answer larger than " + MAX_ANSWER_BYTES + " bytes");
        }
      }
      return new String(buf.toByteArray(), StandardCharsets.UTF_8);
    } finally {
      in.close();
    }
  }

  private static String drain(InputStream in) {
    try {
      String body = read(in);
      return body.length() > 200 ? body.substring(0, 200) : body;
    } catch (IOException ignored) {
      return ""; // the status code is the error we report
    }
  }
}
