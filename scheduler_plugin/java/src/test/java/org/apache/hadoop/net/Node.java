// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures.
// Never shipped; the real build compiles against the Hadoop jars (see ../../build.sh).
package org.apache.hadoop.net;

public interface Node {
  String getNetworkLocation();

  String getName();
}
