// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.net;

import java.util.ArrayList;
import java.util.List;

public class NetworkTopology {
  private final List<Node> leaves = new ArrayList<Node>();
  public int getLeavesCalls;

  public void add(Node node) {
    leaves.add(node);
  }

  public List<Node> getLeaves(String scope) {
    if (!NodeBase.ROOT.equals(scope)) {
      throw new IllegalArgumentException("stub only knows the root scope, got " + scope);
    }
    getLeavesCalls++;
    return new ArrayList<Node>(leaves);
  }
}
