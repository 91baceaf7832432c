// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures.
// Never shipped; the real build compiles against the Hadoop jars (see ../../build.sh).
package org.slf4j;

public interface Logger {
  void info(String format, Object... args);

  void warn(String format, Object... args);

  void debug(String format, Object... args);
}
