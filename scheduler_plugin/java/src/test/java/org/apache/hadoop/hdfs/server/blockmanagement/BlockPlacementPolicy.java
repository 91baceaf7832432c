// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.hdfs.server.blockmanagement;

import java.util.EnumSet;
import java.util.List;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.AddBlockFlag;
import org.apache.hadoop.hdfs.protocol.BlockStoragePolicy;
import org.apache.hadoop.net.NetworkTopology;
import org.apache.hadoop.net.Node;

public abstract class BlockPlacementPolicy {
  public abstract DatanodeStorageInfo[] chooseTarget(String srcPath, int numOfReplicas, Node writer,
      List<DatanodeStorageInfo> chosen, boolean returnChosenNodes, Set<Node> excludedNodes, long blocksize,
      BlockStoragePolicy storagePolicy, EnumSet<AddBlockFlag> flags);

  protected abstract void initialize(Configuration conf, FSClusterStats stats, NetworkTopology clusterMap,
      Host2NodesMap host2datanodeMap);
}
