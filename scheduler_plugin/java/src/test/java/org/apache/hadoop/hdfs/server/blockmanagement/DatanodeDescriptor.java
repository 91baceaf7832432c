// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures.
// Never shipped; the real build compiles against the Hadoop jars (see ../../build.sh).
package org.apache.hadoop.hdfs.server.blockmanagement;

import org.apache.hadoop.hdfs.protocol.DatanodeInfo;

public class DatanodeDescriptor extends DatanodeInfo {
  /** Stub knob: the stock stub refuses nodes that are "full". */
  public boolean full;

  public DatanodeDescriptor(String hostName, String ipAddr, String location) {
    super(hostName, ipAddr, location);
  }
}
