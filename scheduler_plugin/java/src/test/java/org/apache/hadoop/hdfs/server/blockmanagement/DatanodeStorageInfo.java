// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.hdfs.server.blockmanagement;

import org.apache.hadoop.fs.StorageType;

public class DatanodeStorageInfo {
  private final DatanodeDescriptor dn;

  public DatanodeStorageInfo(DatanodeDescriptor dn) {
    this.dn = dn;
  }

  public DatanodeDescriptor getDatanodeDescriptor() {
    return dn;
  }

  public StorageType getStorageType() {
    return StorageType.DISK;
  }

  @Override
  public String toString() {
    return "[DISK]" + dn;
  }
}
