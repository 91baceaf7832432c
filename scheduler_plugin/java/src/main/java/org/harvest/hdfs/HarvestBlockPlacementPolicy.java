package org.harvest.hdfs;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.apache.hadoop.conf.Configurable;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.StorageType;
import org.apache.hadoop.hdfs.AddBlockFlag;
import org.apache.hadoop.hdfs.protocol.BlockStoragePolicy;
import org.apache.hadoop.hdfs.protocol.DatanodeInfo;
import org.apache.hadoop.hdfs.server.blockmanagement.BlockPlacementPolicyDefault;
import org.apache.hadoop.hdfs.server.blockmanagement.DatanodeStorageInfo;
import org.apache.hadoop.net.NetworkTopology;
import org.apache.hadoop.net.Node;
import org.apache.hadoop.net.NodeBase;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * HDFS block placement that asks the harvest placement service where a block's replicas go, and
 * falls back to the stock policy on any error, timeout or unusable answer, so that a write never
 * fails because of this class.
 *
 * <p>Set {@code dfs.block.replicator.classname=org.harvest.hdfs.HarvestBlockPlacementPolicy} and
 * {@code harvest.placement.url} in the NameNode's hdfs-site.xml (see hadoop-conf/README.md).
 *
 * <p>How the service's answer is applied: the stock {@link BlockPlacementPolicyDefault} is called
 * with every live DataNode that is <em>not</em> among the service's targets added to the
 * excluded set. Stock code then picks storages, checks space, load and staleness and orders the
 * pipeline, among the service's targets only. If that yields fewer replicas than asked (a target
 * is full, stale or breaks the rack rule), the block is placed by the stock policy alone.
 *
 * <p>Excess replicas (a file's replication lowered, e.g. by the service's mover after it raised it
 * by one): {@link #chooseReplicaToDelete} asks the service which holder to drop
 * ({@code POST /v1/blocks/drop}); an answer naming one of the candidates of an excess storage type
 * is dropped; no answer, an error or a suspended service leaves the stock choice. Lowering a replication never takes a block below
 * its new factor: the NameNode only deletes replicas beyond it.
 *
 * <p>Only public Hadoop API is named. The NameNode creates the policy with
 * {@code ReflectionUtils.newInstance(class, conf)}, which hands the configuration to a
 * {@link Configurable} before {@code initialize}; this class reads its settings there and does
 * not override {@code initialize}, whose last parameter type ({@code Host2NodesMap}) is
 * package-private in Hadoop. DataNodes are found through the protected {@code clusterMap}
 * (the {@link NetworkTopology}) that the stock {@code initialize} sets.
 */
public class HarvestBlockPlacementPolicy extends BlockPlacementPolicyDefault implements Configurable {
  private static final Logger LOG = LoggerFactory.getLogger(HarvestBlockPlacementPolicy.class);

  public static final String URL_KEY = "harvest.placement.url";
  public static final String TOKEN_FILE_KEY = "harvest.placement.token-file";
  public static final String CONNECT_TIMEOUT_KEY = "harvest.placement.connect-timeout-ms";
  public static final String READ_TIMEOUT_KEY = "harvest.placement.read-timeout-ms";
  public static final String COOLDOWN_KEY = "harvest.placement.cooldown-ms";
  public static final String REFUSAL_COOLDOWN_KEY = "harvest.placement.refusal-cooldown-ms";
  public static final String WARN_INTERVAL_KEY = "harvest.placement.warn-interval-ms";
  public static final String NODE_CACHE_KEY = "harvest.placement.node-cache-ms";
  public static final int CONNECT_TIMEOUT_DEFAULT = 50;
  public static final int READ_TIMEOUT_DEFAULT = 150;
  public static final long COOLDOWN_DEFAULT = 10000L;
  public static final long REFUSAL_COOLDOWN_DEFAULT = 60000L;
  public static final long WARN_INTERVAL_DEFAULT = 60000L;
  public static final long NODE_CACHE_DEFAULT = 10000L;

  private static final PlacementDecider.Clock MONOTONIC = new PlacementDecider.Clock() {
    @Override
    public long nowMs() {
      return System.nanoTime() / 1000000L;
    }
  };

  private static final FallbackLog.Sink SLF4J = new FallbackLog.Sink() {
    @Override
    public void warn(String message) {
      LOG.warn(message);
    }

    @Override
    public void info(String message) {
      LOG.info(message);
    }
  };

  private Configuration conf;
  private volatile PlacementDecider decider;
  private volatile FallbackLog fallbackLog = new FallbackLog(SLF4J, MONOTONIC, WARN_INTERVAL_DEFAULT);
  private long nodeCacheMs = NODE_CACHE_DEFAULT;
  private final Object nodeLock = new Object();
  private Map<String, Node> liveNodes = Collections.emptyMap();
  private long liveNodesAtMs = Long.MIN_VALUE;

  /** Called by the NameNode (through ReflectionUtils) before {@code initialize}. */
  @Override
  public void setConf(Configuration conf) {
    this.conf = conf;
    this.nodeCacheMs = conf.getLong(NODE_CACHE_KEY, NODE_CACHE_DEFAULT);
    this.fallbackLog = new FallbackLog(SLF4J, MONOTONIC, conf.getLong(WARN_INTERVAL_KEY, WARN_INTERVAL_DEFAULT));
    String url = conf.get(URL_KEY);
    if (url == null || url.trim().isEmpty()) {
      LOG.warn("{} is not set: placing every block with the stock policy", URL_KEY);
      this.decider = null;
      return;
    }
    try {
      PlacementClient client = new PlacementClient(url.trim(), readToken(conf.get(TOKEN_FILE_KEY)),
          conf.getInt(CONNECT_TIMEOUT_KEY, CONNECT_TIMEOUT_DEFAULT),
          conf.getInt(READ_TIMEOUT_KEY, READ_TIMEOUT_DEFAULT));
      this.decider = new PlacementDecider(client, conf.getLong(COOLDOWN_KEY, COOLDOWN_DEFAULT),
          conf.getLong(REFUSAL_COOLDOWN_KEY, REFUSAL_COOLDOWN_DEFAULT), MONOTONIC);
      LOG.info("harvest block placement: asking {} (stock policy on failure)", url);
    } catch (IOException ex) {
      this.decider = null;
      LOG.warn("harvest block placement disabled, stock policy only: {}", ex.toString());
    }
  }

  @Override
  public Configuration getConf() {
    return conf;
  }

  /** Visible for tests: replace the service client (e.g. with a fake clock). */
  void setDecider(PlacementDecider decider) {
    this.decider = decider;
  }

  /** Visible for tests: where fallback lines go and on which clock they are rate-limited. */
  void setFallbackLog(FallbackLog log) {
    this.fallbackLog = log;
  }

  private static String readToken(String path) throws IOException {
    if (path == null || path.trim().isEmpty()) {
      return "";
    }
    return new String(Files.readAllBytes(Paths.get(path.trim())), StandardCharsets.UTF_8).trim();
  }

  @Override
  public DatanodeStorageInfo[] chooseTarget(String srcPath, int numOfReplicas, Node writer,
      List<DatanodeStorageInfo> chosen, boolean returnChosenNodes, Set<Node> excludedNodes,
      long blocksize, BlockStoragePolicy storagePolicy, EnumSet<AddBlockFlag> flags) {
    PlacementDecider d = decider;
    if (d != null && numOfReplicas > 0) {
      try {
        DatanodeStorageInfo[] steered = chooseWithService(d, srcPath, numOfReplicas, writer, chosen,
            returnChosenNodes, excludedNodes, blocksize, storagePolicy, flags);
        if (steered != null) {
          return steered;
        }
      } catch (RuntimeException ex) {
        LOG.warn("harvest placement for {} failed, using the stock policy: {}", srcPath, ex.toString());
      }
    }
    return super.chooseTarget(srcPath, numOfReplicas, writer, chosen, returnChosenNodes, excludedNodes,
        blocksize, storagePolicy, flags);
  }

  /** The service-steered choice, or null to fall back to the stock one. */
  private DatanodeStorageInfo[] chooseWithService(PlacementDecider d, String srcPath, int numOfReplicas,
      Node writer, List<DatanodeStorageInfo> chosen, boolean returnChosenNodes, Set<Node> excludedNodes,
      long blocksize, BlockStoragePolicy storagePolicy, EnumSet<AddBlockFlag> flags) {
    Map<String, Node> live = liveNodes();
    Set<String> excludedHosts = new HashSet<String>();
    if (excludedNodes != null) {
      for (Node n : excludedNodes) {
        excludedHosts.add(hostOf(n));
      }
    }
    // The block's replicas so far (re-replication, a pipeline adding a node): the service must know
    // them as holders, not only as excluded nodes, or it places the new replica as if the block were
    // new and may put it in a holder's grid row, column or environment.
    Set<String> chosenHosts = new LinkedHashSet<String>();
    if (chosen != null) {
      for (DatanodeStorageInfo s : chosen) {
        chosenHosts.add(hostOf(s.getDatanodeDescriptor()));
      }
    }
    excludedHosts.addAll(chosenHosts);
    String writerHost = writer instanceof DatanodeInfo ? hostOf(writer) : "";
    PlacementDecider.Decision decision = d.decide(
        new PlacementDecider.Request(writerHost, numOfReplicas, excludedHosts, blocksize, chosenHosts),
        live.keySet());
    fallbackLog.record(decision);
    if (!decision.useService) {
      LOG.debug("block of {}: stock placement, {}", srcPath, decision.reason);
      return null;
    }
    Set<Node> targets = new HashSet<Node>();
    for (String t : decision.targets) {
      targets.add(live.get(PlacementDecider.key(t)));
    }
    if (decision.targets.size() < numOfReplicas) {
      LOG.debug("block of {}: short answer, {} of {} replicas on {}", srcPath, decision.targets.size(),
          numOfReplicas, decision.targets);
    }
    Set<Node> steer = new HashSet<Node>();
    if (excludedNodes != null) {
      steer.addAll(excludedNodes);
    }
    for (Node n : live.values()) {
      if (!targets.contains(n)) {
        steer.add(n);
      }
    }
    // A short answer (fewer usable nodes than replicas) places only that many: asking the stock
    // policy for more among fewer allowed nodes would only log "failed to place enough replicas".
    int wanted = Math.min(numOfReplicas, decision.targets.size());
    DatanodeStorageInfo[] result = super.chooseTarget(srcPath, wanted, writer,
        chosen == null ? new ArrayList<DatanodeStorageInfo>() : chosen, returnChosenNodes, steer, blocksize,
        storagePolicy, flags);
    int already = returnChosenNodes && chosen != null ? chosen.size() : 0;
    if (result == null || result.length - already < wanted) {
      fallbackLog.recordUnusable("service targets " + decision.targets + " for a block of " + srcPath
          + " not all usable by the stock checks (space, load, staleness, racks)");
      return null;
    }
    return result;
  }

  @Override
  public DatanodeStorageInfo chooseReplicaToDelete(Collection<DatanodeStorageInfo> moreThanOne,
      Collection<DatanodeStorageInfo> exactlyOne, List<StorageType> excessTypes,
      Map<String, List<DatanodeStorageInfo>> rackMap) {
    PlacementDecider d = decider;
    if (d != null && !d.suspended()) {
      try {
        List<String> holders = new ArrayList<String>();
        for (DatanodeStorageInfo s : moreThanOne) {
          holders.add(hostOf(s.getDatanodeDescriptor()));
        }
        for (DatanodeStorageInfo s : exactlyOne) {
          holders.add(hostOf(s.getDatanodeDescriptor()));
        }
        String drop = d.chooseDrop(holders);
        if (drop != null) {
          // Not through the stock chooseReplicaToDelete: with two racks its pickupReplicaSet takes
          // every replica of a rack holding two (from rackMap), whatever candidates it is given,
          // and drops the one with the oldest heartbeat or least space among them.
          String want = PlacementDecider.key(drop);
          List<DatanodeStorageInfo> all = new ArrayList<DatanodeStorageInfo>(moreThanOne);
          all.addAll(exactlyOne);
          for (DatanodeStorageInfo s : all) {
            if (hostOf(s.getDatanodeDescriptor()).equals(want) && excessTypes.remove(s.getStorageType())) {
              LOG.info("harvest: excess replica on {} dropped as the service asked", want);
              return s;
            }
          }
        }
      } catch (RuntimeException ex) {
        LOG.warn("harvest drop choice failed, using the stock policy: {}", ex.toString());
      }
    }
    return super.chooseReplicaToDelete(moreThanOne, exactlyOne, excessTypes, rackMap);
  }

  /** Name used with the service: the DataNode's host name, lower case. */
  static String hostOf(Node n) {
    if (n instanceof DatanodeInfo) {
      return PlacementDecider.key(((DatanodeInfo) n).getHostName());
    }
    return n == null ? "" : PlacementDecider.key(n.getName());
  }

  /** Live, in-service DataNodes by host name and IP, refreshed at most every node-cache-ms. */
  Map<String, Node> liveNodes() {
    long now = System.nanoTime() / 1000000L;
    synchronized (nodeLock) {
      if (liveNodesAtMs != Long.MIN_VALUE && now - liveNodesAtMs < nodeCacheMs) {
        return liveNodes;
      }
      Map<String, Node> byHost = new HashMap<String, Node>();
      for (Node n : clusterMap.getLeaves(NodeBase.ROOT)) {
        if (n instanceof DatanodeInfo) {
          DatanodeInfo dn = (DatanodeInfo) n;
          if (dn.isDecommissioned() || dn.isDecommissionInProgress() || dn.isInMaintenance()
              || dn.isEnteringMaintenance()) {
            continue;
          }
          byHost.put(PlacementDecider.key(dn.getHostName()), n);
          byHost.put(PlacementDecider.key(dn.getIpAddr()), n);
        }
      }
      liveNodes = Collections.unmodifiableMap(byHost);
      liveNodesAtMs = now;
      return liveNodes;
    }
  }
}
