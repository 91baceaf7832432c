// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.conf;

import java.util.HashMap;
import java.util.Map;

public class Configuration {
  private final Map<String, String> values = new HashMap<String, String>();

  public void set(String name, String value) {
    values.put(name, value);
  }

  public String get(String name) {
    return values.get(name);
  }

  public String get(String name, String defaultValue) {
    String v = values.get(name);
    return v == null ? defaultValue : v;
  }

  public int getInt(String name, int defaultValue) {
    String v = values.get(name);
    return v == null ? defaultValue : Integer.parseInt(v.trim());
  }

  public <U> Class<? extends U> getClass(String name, Class<? extends U> defaultValue, Class<U> xface) {
    String v = values.get(name);
    if (v == null) {
      return defaultValue;
    }
    try {
      return Class.forName(v.trim()).asSubclass(xface);
    } catch (ClassNotFoundException e) {
      throw new RuntimeException(e);
    }
  }

  public long getLong(String name, long defaultValue) {
    String v = values.get(name);
    return v == null ? defaultValue : Long.parseLong(v.trim());
  }
}
