// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures.
// Never shipped; the real build compiles against the Hadoop jars (see ../../build.sh).
package org.apache.hadoop.hdfs.protocol;

import org.apache.hadoop.net.Node;

public class DatanodeInfo implements Node {
  private final String hostName;
  private final String ipAddr;
  private final String location;
  public boolean decommissioned;
  public boolean inMaintenance;

  public DatanodeInfo(String hostName, String ipAddr, String location) {
    this.hostName = hostName;
    this.ipAddr = ipAddr;
    this.location = location;
  }

  public String getHostName() {
    return hostName;
  }

  public String getIpAddr() {
    return ipAddr;
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
    return ipAddr + ":9866";
  }

  @Override
  public String getNetworkLocation() {
    return location;
  }

  @Override
  public String toString() {
    return hostName;
  }
}
