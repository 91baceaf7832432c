package org.harvest.hdfs;

import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON this shim needs, with no library: a parser for the service's answer and a
 * string escaper for the request. Objects become {@code Map<String, Object>}, arrays
 * {@code List<Object>}, numbers {@code Double}, plus String, Boolean and null.
 */
final class MiniJson {
  private final String text;
  private int pos;

  private MiniJson(String text) {
    this.text = text;
  }

  /** Parses one JSON value; throws IllegalArgumentException naming the offset on bad input. */
  static Object parse(String text) {
    MiniJson p = new MiniJson(text);
    p.skipSpace();
    Object value = p.value(0);
    p.skipSpace();
    if (p.pos != text.length()) {
      throw p.error("trailing characters");
    }
    return value;
  }

  static String quote(String s) {
    StringBuilder b = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          if (c < 0x20) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    return b.append('"').toString();
  }

  static String quoteAll(Collection<String> items) {
    StringBuilder b = new StringBuilder("[");
    boolean first = true;
    for (String s : items) {
      if (!first) {
        b.append(',');
      }
      b.append(quote(s));
      first = false;
    }
    return b.append(']').toString();
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException("bad JSON at offset " + pos + ": " + what);
  }

  private void skipSpace() {
    while (pos < text.length() && Character.isWhitespace(text.charAt(pos))) {
      pos++;
    }
  }

  private Object value(int depth) {
    if (depth > 64) {
      throw error("nested too deeply");
    }
    if (pos >= text.length()) {
      throw error("unexpected end");
    }
    char c = text.charAt(pos);
    if (c == '{') {
      return object(depth);
    } else if (c == '[') {
      return array(depth);
    } else if (c == '"') {
      return string();
    } else if (text.startsWith("true", pos)) {
      pos += 4;
      return Boolean.TRUE;
    } else if (text.startsWith("false", pos)) {
      pos += 5;
      return Boolean.FALSE;
    } else if (text.startsWith("null", pos)) {
      pos += 4;
      return null;
    }
    return number();
  }

  private Map<String, Object> object(int depth) {
    Map<String, Object> out = new LinkedHashMap<String, Object>();
    pos++;
    skipSpace();
    if (pos < text.length() && text.charAt(pos) == '}') {
      pos++;
      return out;
    }
    while (true) {
      skipSpace();
      if (pos >= text.length() || text.charAt(pos) != '"') {
        throw error("expected a key");
      }
      String key = string();
      skipSpace();
      expect(':');
      skipSpace();
      out.put(key, value(depth + 1));
      skipSpace();
      if (pos < text.length() && text.charAt(pos) == ',') {
        pos++;
        continue;
      }
      expect('}');
      return out;
    }
  }

  private List<Object> array(int depth) {
    List<Object> out = new ArrayList<Object>();
    pos++;
    skipSpace();
    if (pos < text.length() && text.charAt(pos) == ']') {
      pos++;
      return out;
    }
    while (true) {
      skipSpace();
      out.add(value(depth + 1));
      skipSpace();
      if (pos < text.length() && text.charAt(pos) == ',') {
        pos++;
        continue;
      }
      expect(']');
      return out;
    }
  }

  private void expect(char c) {
    if (pos >= text.length() || text.charAt(pos) != c) {
      throw error("expected '" + c + "'");
    }
    pos++;
  }

  private String string() {
    StringBuilder b = new StringBuilder();
    pos++;
    while (pos < text.length()) {
      char c = text.charAt(pos++);
      if (c == '"') {
        return b.toString();
      }
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (pos >= text.length()) {
        break;
      }
      char e = text.charAt(pos++);
      switch (e) {
        case 'n': b.append('\n'); break;
        case 't': b.append('\t'); break;
        case 'r': b.append('\r'); break;
        case 'b': b.append('\b'); break;
        case 'f': b.append('\f'); break;
        case 'u':
          if (pos + 4 > text.length()) {
            throw error("short \\u escape");
          }
          b.append((char) Integer.parseInt(text.substring(pos, pos + 4), 16));
          pos += 4;
          break;
        default: b.append(e);
      }
    }
    throw error("unterminated string");
  }

  private Double number() {
    int start = pos;
    while (pos < text.length() && "+-0123456789.eE".indexOf(text.charAt(pos)) >= 0) {
      pos++;
    }
    if (start == pos) {
      throw error("unexpected character '" + text.charAt(pos) + "'");
    }
    try {
      return Double.valueOf(text.substring(start, pos));
    } catch (NumberFormatException ex) {
      throw error("bad number");
    }
  }
}
