// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures.
// Never shipped; the real build compiles against the Hadoop jars (see ../../build.sh).
package org.apache.hadoop.net;

public class NodeBase implements Node {
  public static final String ROOT = "";
  private final String name;
  private final String location;

  public NodeBase(String name, String location) {
    this.name = name;
    this.location = location;
  }

  @Override
  public String getName() {
    return name;
  }

  @Override
  public String getNetworkLocation() {
    return location;
  }
}
