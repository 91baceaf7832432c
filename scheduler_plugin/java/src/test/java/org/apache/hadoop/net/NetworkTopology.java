// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures.
// Never shipped; the real build compiles against the Hadoop jars (see ../../build.sh).
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
