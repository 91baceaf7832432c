// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.hdfs.server.blockmanagement;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.protocol.BlockType;
import org.apache.hadoop.net.NetworkTopology;
import org.apache.hadoop.util.ReflectionUtils;

/** How the NameNode makes its placement policy: newInstance (setConf), then initialize. */
public class BlockPlacementPolicies {
  private final BlockPlacementPolicy replicationPolicy;

  public BlockPlacementPolicies(Configuration conf, FSClusterStats stats, NetworkTopology clusterMap,
      Host2NodesMap host2datanodeMap) {
    final Class<? extends BlockPlacementPolicy> replicatorClass = conf.getClass(
        "dfs.block.replicator.classname", BlockPlacementPolicyDefault.class, BlockPlacementPolicy.class);
    replicationPolicy = ReflectionUtils.newInstance(replicatorClass, conf);
    replicationPolicy.initialize(conf, stats, clusterMap, host2datanodeMap);
  }

  public BlockPlacementPolicy getPolicy(BlockType blockType) {
    if (blockType != BlockType.CONTIGUOUS) {
      throw new IllegalArgumentException("stub only knows CONTIGUOUS blocks");
    }
    return replicationPolicy;
  }
}
