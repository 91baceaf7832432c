// Test stub: the minimal slice of the Hadoop 3.3 API the shim uses, with the same signatures and
// visibility as the real classes (checked with javap against 3.2.1 and 3.3.6; see
// tests/plugins/test_java_stubs.py). Never shipped; the real build compiles against the Hadoop
// jars (see scheduler_plugin/java/build.sh).
package org.apache.hadoop.hdfs.server.blockmanagement;

import java.util.ArrayList;
import java.util.Collection;
import java.util.EnumSet;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.StorageType;
import org.apache.hadoop.hdfs.AddBlockFlag;
import org.apache.hadoop.hdfs.protocol.BlockStoragePolicy;
import org.apache.hadoop.net.NetworkTopology;
import org.apache.hadoop.net.Node;

/**
 * Deterministic stand-in for the stock policy: the writer first when it is a usable node, then
 * leaves in topology order, skipping excluded, chosen and "full" nodes. Like the real one it
 * adds what it picks to the excluded set it was given and may return fewer than asked.
 */
public class BlockPlacementPolicyDefault extends BlockPlacementPolicy {
  protected NetworkTopology clusterMap;
  public static int stockCalls;

  protected BlockPlacementPolicyDefault() {
  }

  @Override
  public void initialize(Configuration conf, FSClusterStats stats, NetworkTopology clusterMap,
      Host2NodesMap host2datanodeMap) {
    this.clusterMap = clusterMap;
  }

  @Override
  public DatanodeStorageInfo[] chooseTarget(String srcPath, int numOfReplicas, Node writer,
      List<DatanodeStorageInfo> chosen, boolean returnChosenNodes, Set<Node> excludedNodes, long blocksize,
      BlockStoragePolicy storagePolicy, EnumSet<AddBlockFlag> flags) {
    stockCalls++;
    Set<Node> excluded = excludedNodes == null ? new HashSet<Node>() : excludedNodes;
    List<DatanodeStorageInfo> results = new ArrayList<DatanodeStorageInfo>(chosen);
    for (DatanodeStorageInfo s : chosen) {
      excluded.add(s.getDatanodeDescriptor());
    }
    List<Node> order = new ArrayList<Node>();
    if (writer != null) {
      order.add(writer);
    }
    order.addAll(clusterMap.getLeaves(""));
    int picked = 0;
    for (Node n : order) {
      if (picked == numOfReplicas) {
        break;
      }
      if (!(n instanceof DatanodeDescriptor) || excluded.contains(n) || ((DatanodeDescriptor) n).full) {
        continue;
      }
      excluded.add(n);
      results.add(new DatanodeStorageInfo((DatanodeDescriptor) n));
      picked++;
    }
    if (!returnChosenNodes) {
      results.removeAll(chosen);
    }
    return results.toArray(new DatanodeStorageInfo[0]);
  }

  /** Like the real one: a replica of a rack with more than one, if any, else any (here the first). */
  public DatanodeStorageInfo chooseReplicaToDelete(Collection<DatanodeStorageInfo> moreThanOne,
      Collection<DatanodeStorageInfo> exactlyOne, List<StorageType> excessTypes,
      Map<String, List<DatanodeStorageInfo>> rackMap) {
    Collection<DatanodeStorageInfo> from = moreThanOne.isEmpty() ? exactlyOne : moreThanOne;
    return from.isEmpty() ? null : from.iterator().next();
  }
}
