// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.util;

import java.lang.reflect.Constructor;

import org.apache.hadoop.conf.Configurable;
import org.apache.hadoop.conf.Configuration;

public class ReflectionUtils {
  /** As in Hadoop: the no-argument constructor (made accessible), then setConf for a Configurable. */
  public static <T> T newInstance(Class<T> theClass, Configuration conf) {
    try {
      Constructor<T> ctor = theClass.getDeclaredConstructor();
      ctor.setAccessible(true);
      T result = ctor.newInstance();
      if (conf != null && result instanceof Configurable) {
        ((Configurable) result).setConf(conf);
      }
      return result;
    } catch (ReflectiveOperationException e) {
      throw new RuntimeException(e);
    }
  }
}
