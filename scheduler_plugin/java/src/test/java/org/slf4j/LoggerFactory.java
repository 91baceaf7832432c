// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.slf4j;

public final class LoggerFactory {
  private LoggerFactory() {
  }

  public static Logger getLogger(Class<?> cls) {
    final String name = cls.getSimpleName();
    return new Logger() {
      private void log(String level, String format, Object... args) {
        String msg = format;
        for (Object a : args) {
          msg = msg.replaceFirst("\\{\\}", java.util.regex.Matcher.quoteReplacement(String.valueOf(a)));
        }
        System.err.println(level + " " + name + ": " + msg);
      }

      @Override
      public void info(String format, Object... args) {
        log("INFO", format, args);
      }

      @Override
      public void warn(String format, Object... args) {
        log("WARN", format, args);
      }

      @Override
      public void debug(String format, Object... args) {
      }
    };
  }
}
