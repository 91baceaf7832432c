// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.hdfs.protocol;

public class DatanodeID implements Comparable<DatanodeID> {
  private final String ipAddr;
  private final String hostName;
  private final String datanodeUuid;
  private final int xferPort;

  public DatanodeID(String ipAddr, String hostName, String datanodeUuid, int xferPort, int infoPort,
      int infoSecurePort, int ipcPort) {
    this.ipAddr = ipAddr;
    this.hostName = hostName;
    this.datanodeUuid = datanodeUuid;
    this.xferPort = xferPort;
  }

  public DatanodeID(DatanodeID from) {
    this(from.ipAddr, from.hostName, from.datanodeUuid, from.xferPort, 0, 0, 0);
  }

  public String getIpAddr() {
    return ipAddr;
  }

  public String getHostName() {
    return hostName;
  }

  public int getXferPort() {
    return xferPort;
  }

  public String getXferAddr() {
    return ipAddr + ":" + xferPort;
  }

  @Override
  public int compareTo(DatanodeID that) {
    return getXferAddr().compareTo(that.getXferAddr());
  }

  @Override
  public boolean equals(Object to) {
    return this == to || (to instanceof DatanodeID && getXferAddr().equals(((DatanodeID) to).getXferAddr()));
  }

  @Override
  public int hashCode() {
    return getXferAddr().hashCode();
  }

  @Override
  public String toString() {
    return getXferAddr();
  }
}
