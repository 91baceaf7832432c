// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.hdfs.protocol;

import org.apache.hadoop.net.Node;

public class DatanodeInfo extends DatanodeID implements Node {
  private final String location;
  /** Stub-only knobs standing for the admin states the NameNode tracks. */
  public boolean decommissioned;
  public boolean inMaintenance;

  protected DatanodeInfo(DatanodeID nodeID, String location) {
    super(nodeID);
    this.location = location;
  }

  public boolean isDecommissioned() {
    return decommissioned;
  }

  public boolean isDecommissionInProgress() {
    return false;
  }

  public boolean isInMaintenance() {
    return inMaintenance;
  }

  public boolean isEnteringMaintenance() {
    return false;
  }

  @Override
  public String getName() {
    return getXferAddr();
  }

  @Override
  public String getNetworkLocation() {
    return location;
  }
}
