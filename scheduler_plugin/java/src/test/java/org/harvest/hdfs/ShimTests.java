package org.harvest.hdfs;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.StorageType;
import org.apache.hadoop.hdfs.AddBlockFlag;
import org.apache.hadoop.hdfs.protocol.BlockStoragePolicy;
import org.apache.hadoop.hdfs.protocol.BlockType;
import org.apache.hadoop.hdfs.protocol.DatanodeID;
import org.apache.hadoop.hdfs.server.blockmanagement.BlockPlacementPolicies;
import org.apache.hadoop.hdfs.server.blockmanagement.BlockPlacementPolicy;
import org.apache.hadoop.hdfs.server.blockmanagement.BlockPlacementPolicyDefault;
import org.apache.hadoop.hdfs.server.blockmanagement.DatanodeDescriptor;
import org.apache.hadoop.hdfs.server.blockmanagement.DatanodeStorageInfo;
import org.apache.hadoop.net.NetworkTopology;
import org.apache.hadoop.net.Node;

/**
 * Unit tests of the shim, run with a plain main (no JUnit offline). Arguments: {@code base-url
 * token-file}; the base URL is a local fake service whose first path segment picks its
 * behaviour (good, slow, wrong, garbage, error, full); a closed port stands for "down".
 * Prints {@code PASS name} / {@code FAIL name: why} per test and exits 1 if any failed.
 */
public final class ShimTests {
  private static String base;
  private static String tokenFile;
  private static String downUrl;
  private static int failed;

  interface Body {
    void run() throws Exception;
  }

  private static void test(String name, Body body) {
    try {
      body.run();
      System.out.println("PASS " + name);
    } catch (Throwable t) {
      failed++;
      System.out.println("FAIL " + name + ": " + t);
    }
  }

  private static void check(boolean ok, String what) {
    if (!ok) {
      throw new AssertionError(what);
    }
  }

  private static void eq(Object expected, Object actual) {
    if (expected == null ? actual != null : !expected.equals(actual)) {
      throw new AssertionError("expected " + expected + ", got " + actual);
    }
  }

  // --- decision logic (no Hadoop, no network) ------------------------------------------------

  static final class FakeClock implements PlacementDecider.Clock {
    final AtomicLong now = new AtomicLong(1000);

    @Override
    public long nowMs() {
      return now.get();
    }
  }

  static final class FakeService implements PlacementDecider.Service {
    final AtomicInteger calls = new AtomicInteger();
    volatile PlacementDecider.Answer answer;
    volatile IOException failure;

    @Override
    public PlacementDecider.Answer choose(PlacementDecider.Request request) throws IOException {
      calls.incrementAndGet();
      if (failure != null) {
        throw failure;
      }
      return answer;
    }
  }

  private static final Set<String> LIVE = new HashSet<String>(Arrays.asList("a", "b", "c", "d"));

  private static PlacementDecider.Request req(int n, String... excluded) {
    return new PlacementDecider.Request("a", n, Arrays.asList(excluded), 128L << 20);
  }

  private static void deciderTests() {
    test("decider uses a valid answer, first n targets in order", () -> {
      FakeService s = new FakeService();
      s.answer = new PlacementDecider.Answer(Arrays.asList("C", "b", "d"), false, "");
      PlacementDecider.Decision d = new PlacementDecider(s, 1000, new FakeClock()).decide(req(2), LIVE);
      check(d.useService, "should use the service: " + d);
      eq(Arrays.asList("C", "b"), d.targets);
    });
    test("decider falls back and suspends the service for the cooldown after a failure", () -> {
      FakeService s = new FakeService();
      FakeClock clock = new FakeClock();
      PlacementDecider dec = new PlacementDecider(s, 1000, clock);
      s.failure = new IOException("connect refused");
      check(!dec.decide(req(2), LIVE).useService, "failure must give stock");
      s.failure = null;
      s.answer = new PlacementDecider.Answer(Arrays.asList("b", "c"), false, "");
      clock.now.addAndGet(999);
      PlacementDecider.Decision during = dec.decide(req(2), LIVE);
      check(!during.useService && during.reason.contains("suspended"), "still suspended: " + during);
      eq(1, s.calls.get());
      clock.now.addAndGet(1);
      check(dec.decide(req(2), LIVE).useService, "asks again after the cooldown");
      eq(2, s.calls.get());
    });
    test("decider does not suspend the service when it refuses one request (HTTP 4xx)", () -> {
      FakeService s = new FakeService();
      PlacementDecider dec = new PlacementDecider(s, 1000, new FakeClock());
      s.failure = new PlacementDecider.RejectedException(404, "HTTP 404: unknown writer");
      PlacementDecider.Decision d = dec.decide(req(2), LIVE);
      check(!d.useService && d.reason.contains("refused"), d.toString());
      check(!dec.suspended(), "a refusal must not suspend the service");
      dec.decide(req(2), LIVE);
      eq(2, s.calls.get());
    });
    test("decider caches a 409 per (replicas, excluded count) for the refusal cooldown, not other 4xx", () -> {
      FakeService s = new FakeService();
      FakeClock clock = new FakeClock();
      PlacementDecider dec = new PlacementDecider(s, 1000, 30000, clock);
      s.failure = new PlacementDecider.RejectedException(409, "HTTP 409: 10 replicas, 4 usable nodes");
      eq(PlacementDecider.Kind.REFUSED, dec.decide(req(2, "x"), LIVE).kind);
      for (int i = 0; i < 20; i++) { // the re-replication loop asking again every second
        clock.now.addAndGet(1000);
        PlacementDecider.Decision d = dec.decide(req(2, "y"), LIVE);
        check(d.kind == PlacementDecider.Kind.REFUSAL_CACHED && d.reason.contains("4 usable"), d.toString());
      }
      eq(1, s.calls.get());
      check(!dec.suspended(), "a refusal must not suspend the service");
      dec.decide(req(3, "x"), LIVE); // another shape: asked
      dec.decide(req(2), LIVE);
      eq(3, s.calls.get());
      clock.now.addAndGet(10000); // 30 s after the first 409: asked again
      s.failure = null;
      s.answer = new PlacementDecider.Answer(Arrays.asList("b", "c"), false, "");
      check(dec.decide(req(2, "x"), LIVE).useService, "asks again after the refusal cooldown");
      eq(4, s.calls.get());
      s.failure = new PlacementDecider.RejectedException(404, "HTTP 404: unknown writer");
      dec.decide(req(1), LIVE);
      dec.decide(req(1), LIVE);
      eq(6, s.calls.get());
    });
    test("fallback log: one WARN per interval during an outage, one INFO line on recovery", () -> {
      FakeClock clock = new FakeClock();
      List<String> lines = new ArrayList<String>();
      FallbackLog log = new FallbackLog(sink(lines), clock, 60000);
      FakeService s = new FakeService();
      PlacementDecider dec = new PlacementDecider(s, 1000, 60000, clock);
      s.failure = new IOException("connect refused");
      for (int i = 0; i < 300; i++) { // 5 minutes, a block a second
        log.record(dec.decide(req(2), LIVE));
        clock.now.addAndGet(1000);
      }
      check(lines.size() == 5, "one WARN a minute: " + lines);
      check(lines.get(0).startsWith("WARN harvest placement service unavailable") && lines.get(0).contains(
          "connect refused") && lines.get(0).contains(": 1 block(s);"), lines.get(0));
      check(lines.get(1).contains(": 60 block(s) in the last 60000 ms"), lines.get(1));
      s.failure = null;
      s.answer = new PlacementDecider.Answer(Arrays.asList("b", "c"), false, "");
      clock.now.addAndGet(1000);
      log.record(dec.decide(req(2), LIVE));
      log.record(dec.decide(req(2), LIVE));
      eq(6, lines.size());
      check(lines.get(5).startsWith("INFO harvest placement service answering again after 301000 ms; 300 block(s)"),
          lines.get(5));
      s.failure = new IOException("read timed out"); // a new outage is reported at once
      clock.now.addAndGet(2000);
      log.record(dec.decide(req(2), LIVE));
      eq(7, lines.size());
      check(lines.get(6).startsWith("WARN") && lines.get(6).contains("read timed out"), lines.get(6));
    });
    test("fallback log: refusals are a separate rate-limited WARN without recovery lines", () -> {
      FakeClock clock = new FakeClock();
      List<String> lines = new ArrayList<String>();
      FallbackLog log = new FallbackLog(sink(lines), clock, 60000);
      FakeService s = new FakeService();
      PlacementDecider dec = new PlacementDecider(s, 1000, 60000, clock);
      for (int i = 0; i < 120; i++) {
        s.failure = i % 2 == 0 ? new PlacementDecider.RejectedException(409, "HTTP 409: too many") : null;
        s.answer = new PlacementDecider.Answer(Arrays.asList("b", "c"), false, "");
        log.record(dec.decide(req(i % 2 == 0 ? 3 : 2), LIVE));
        clock.now.addAndGet(1000);
      }
      eq(2, lines.size());
      check(lines.get(0).startsWith("WARN harvest placement service answer not used") && lines.get(0).contains(
          "409"), lines.get(0));
      check(lines.get(1).contains(": 30 block(s) in the last 60000 ms"), lines.get(1));
    });
    test("decider takes a short answer (fewer usable nodes than replicas) but no empty or invalid one", () -> {
      FakeService s = new FakeService();
      PlacementDecider dec = new PlacementDecider(s, 1000, 60000, new FakeClock());
      s.answer = new PlacementDecider.Answer(Arrays.asList("c", "b"), false, "short: only 2 usable", true);
      PlacementDecider.Decision d = dec.decide(req(3), LIVE);
      check(d.useService, d.toString());
      eq(Arrays.asList("c", "b"), d.targets);
      s.answer = new PlacementDecider.Answer(Collections.<String>emptyList(), false, "short", true);
      check(dec.decide(req(3), LIVE).kind == PlacementDecider.Kind.INVALID, "an empty short answer is unusable");
      s.answer = new PlacementDecider.Answer(Arrays.asList("c", "zz"), false, "short", true);
      check(dec.decide(req(3), LIVE).kind == PlacementDecider.Kind.INVALID, "a dead target is still invalid");
      s.answer = new PlacementDecider.Answer(Arrays.asList("c", "b"), false, "", false);
      check(dec.decide(req(3), LIVE).kind == PlacementDecider.Kind.INVALID, "too few without 'short' is invalid");
    });
    test("decider rejects too few, duplicate, dead, excluded and missing targets without suspending", () -> {
      List<List<String>> bad = new ArrayList<List<String>>();
      bad.add(Arrays.asList("b"));
      bad.add(Arrays.asList("b", "B"));
      bad.add(Arrays.asList("b", "zz"));
      bad.add(Arrays.asList("b", "x"));
      bad.add(null);
      FakeService s = new FakeService();
      PlacementDecider dec = new PlacementDecider(s, 1000, new FakeClock());
      for (List<String> targets : bad) {
        s.answer = new PlacementDecider.Answer(targets, false, "");
        PlacementDecider.Decision d = dec.decide(req(2, "x"), new HashSet<String>(Arrays.asList("a", "b", "x")));
        check(!d.useService && d.reason.startsWith("invalid answer"), targets + " -> " + d);
      }
      check(!dec.suspended(), "an invalid answer must not suspend the service");
    });
    test("request JSON round-trips through the parser, escapes included", () -> {
      PlacementDecider.Request r = new PlacementDecider.Request("w\"1", 3, Arrays.asList("x\\y", "z"), 42L);
      Map<?, ?> m = (Map<?, ?>) MiniJson.parse(r.toJson());
      eq("w\"1", m.get("writer"));
      eq(3.0, m.get("replicas"));
      eq(Arrays.asList("x\\y", "z"), m.get("excluded"));
      eq(42.0, m.get("block_size"));
    });
    test("answer parsing accepts the contract and rejects the rest", () -> {
      PlacementDecider.Answer a = PlacementClient.parseAnswer(
          " {\"targets\": [\"h1\", \"h2\"], \"relaxed\": true, \"reason\": \"rows \\u0031\", \"x\": [1, {\"y\": null}]}");
      eq(Arrays.asList("h1", "h2"), a.targets);
      check(a.relaxed, "relaxed");
      eq("rows 1", a.reason);
      for (String bad : new String[] {"[]", "{\"targets\": \"h1\"}", "{\"targets\": [1]}", "{\"targets\": [", "nope"}) {
        try {
          PlacementClient.parseAnswer(bad);
          throw new AssertionError("accepted " + bad);
        } catch (IOException expected) {
          // ok
        }
      }
    });
  }

  static FallbackLog.Sink sink(final List<String> lines) {
    return new FallbackLog.Sink() {
      @Override
      public synchronized void warn(String message) {
        lines.add("WARN " + message);
      }

      @Override
      public synchronized void info(String message) {
        lines.add("INFO " + message);
      }
    };
  }

  // --- HTTP client against the local fake service ----------------------------------------------

  private static PlacementClient client(String mode) throws IOException {
    return new PlacementClient(base + "/" + mode + "/v1/blocks/place", "tok", 200, 300);
  }

  private static void clientTests() {
    test("client parses a good answer", () -> {
      PlacementDecider.Answer a = client("good").choose(req(3));
      eq(Arrays.asList("dn5.example.com", "DN3.example.com", "dn1.example.com"), a.targets);
    });
    for (final String mode : new String[] {"slow", "garbage", "error"}) {
      test("client turns a " + mode + " service into an IOException within its timeouts", () -> {
        long t0 = System.nanoTime();
        try {
          client(mode).choose(req(3));
          throw new AssertionError("no exception");
        } catch (IOException expected) {
          long ms = (System.nanoTime() - t0) / 1000000L;
          check(ms < 900, "took " + ms + " ms");
        }
      });
    }
    test("client reports HTTP 4xx as a refusal and 5xx as a failure", () -> {
      try {
        client("reject").choose(req(3));
        throw new AssertionError("no exception");
      } catch (PlacementDecider.RejectedException expected) {
        check(expected.getMessage().contains("404") && expected.getMessage().contains("unknown"),
            expected.getMessage());
      }
      try {
        client("error").choose(req(3));
        throw new AssertionError("no exception");
      } catch (PlacementDecider.RejectedException wrong) {
        throw new AssertionError("5xx must not be a refusal");
      } catch (IOException expected) {
        check(expected.getMessage().contains("500"), expected.getMessage());
      }
    });
    test("client turns a down service into an IOException quickly", () -> {
      long t0 = System.nanoTime();
      try {
        new PlacementClient(downUrl, "", 200, 300).choose(req(3));
        throw new AssertionError("no exception");
      } catch (IOException expected) {
        check((System.nanoTime() - t0) / 1000000L < 900, "too slow");
      }
    });
  }

  // --- the shim on the Hadoop stubs ------------------------------------------------------------

  private static List<DatanodeDescriptor> nodes;
  private static final Map<String, String> extraConf = new LinkedHashMap<String, String>();

  private static HarvestBlockPlacementPolicy shim(String mode) {
    NetworkTopology topo = new NetworkTopology();
    nodes = new ArrayList<DatanodeDescriptor>();
    for (int i = 1; i <= 6; i++) {
      DatanodeDescriptor dn = new DatanodeDescriptor(
          new DatanodeID("10.0.0." + i, "dn" + i + ".example.com", "uuid-" + i, 9866, 9864, 0, 9867), "/r" + (i % 2));
      nodes.add(dn);
      topo.add(dn);
    }
    Configuration conf = new Configuration();
    if (mode != null) {
      conf.set(HarvestBlockPlacementPolicy.URL_KEY, mode.startsWith("http") ? mode : base + "/" + mode + "/v1/blocks/place");
    }
    conf.set(HarvestBlockPlacementPolicy.TOKEN_FILE_KEY, tokenFile);
    conf.set(HarvestBlockPlacementPolicy.READ_TIMEOUT_KEY, "300");
    conf.set(HarvestBlockPlacementPolicy.CONNECT_TIMEOUT_KEY, "200");
    conf.set("dfs.block.replicator.classname", HarvestBlockPlacementPolicy.class.getName());
    for (Map.Entry<String, String> e : extraConf.entrySet()) {
      conf.set(e.getKey(), e.getValue());
    }
    // As the NameNode does: ReflectionUtils.newInstance (setConf), then initialize.
    BlockPlacementPolicy p = new BlockPlacementPolicies(conf, null, topo, null).getPolicy(BlockType.CONTIGUOUS);
    return (HarvestBlockPlacementPolicy) p;
  }

  private static List<String> hosts(DatanodeStorageInfo[] result) {
    List<String> out = new ArrayList<String>();
    for (DatanodeStorageInfo s : result) {
      out.add(s.getDatanodeDescriptor().getHostName());
    }
    return out;
  }

  private static DatanodeStorageInfo[] place(HarvestBlockPlacementPolicy p, Set<Node> excluded) {
    return p.chooseTarget("/warehouse/t/part-0", 3, null, new ArrayList<DatanodeStorageInfo>(), false, excluded,
        128L << 20, new BlockStoragePolicy("HOT"), EnumSet.noneOf(AddBlockFlag.class));
  }

  private static final List<String> STOCK = Arrays.asList("dn1.example.com", "dn2.example.com", "dn3.example.com");

  private static void shimTests() {
    test("shim places replicas on the service's targets", () -> {
      List<String> got = hosts(place(shim("good"), new HashSet<Node>()));
      eq(new HashSet<String>(Arrays.asList("dn5.example.com", "dn3.example.com", "dn1.example.com")),
          new HashSet<String>(got));
    });
    test("shim leaves the caller's excluded set untouched and tells the service about it", () -> {
      HarvestBlockPlacementPolicy p = shim("good-excluding");
      Set<Node> excluded = new HashSet<Node>();
      excluded.add(nodes.get(1));
      List<String> got = hosts(place(p, excluded));
      eq(1, excluded.size());
      check(!got.contains("dn2.example.com"), "excluded node chosen: " + got);
      eq(3, got.size());
    });
    for (final String mode : new String[] {"slow", "wrong", "garbage", "error", "full"}) {
      test("shim falls back to the stock choice when the service is " + mode, () -> {
        HarvestBlockPlacementPolicy p = shim(mode);
        if ("full".equals(mode)) {
          // The service answers {dn4, dn5, dn6}; dn4 is full, so steering yields 2 replicas of 3 and
          // the stock policy places the block on its own.
          nodes.get(3).full = true;
        }
        long t0 = System.nanoTime();
        List<String> got = hosts(place(p, new HashSet<Node>()));
        long ms = (System.nanoTime() - t0) / 1000000L;
        eq(STOCK, got);
        check(ms < 1500, "fallback took " + ms + " ms");
      });
    }
    test("shim falls back when the service is down, then skips it during the cooldown", () -> {
      HarvestBlockPlacementPolicy p = shim(downUrl);
      eq(STOCK, hosts(place(p, new HashSet<Node>())));
      long t0 = System.nanoTime();
      for (int i = 0; i < 50; i++) {
        eq(STOCK, hosts(place(p, new HashSet<Node>())));
      }
      long ms = (System.nanoTime() - t0) / 1000000L;
      check(ms < 500, "50 blocks during the cooldown took " + ms + " ms");
    });
    test("shim places a short answer's replicas on its targets only (real HTTP)", () -> {
      List<String> got = hosts(place(shim("short"), new HashSet<Node>()));
      eq(Arrays.asList("dn4.example.com", "dn6.example.com"), got);
    });
    test("shim tells the service which nodes already hold the block (re-replication)", () -> {
      HarvestBlockPlacementPolicy p = shim("good-excluding");
      List<DatanodeStorageInfo> held = new ArrayList<DatanodeStorageInfo>();
      held.add(new DatanodeStorageInfo(nodes.get(1)));
      held.add(new DatanodeStorageInfo(nodes.get(3)));
      List<String> got = hosts(p.chooseTarget("/warehouse/t/part-repl", 1, nodes.get(1), held, false,
          new HashSet<Node>(), 128L << 20, new BlockStoragePolicy("HOT"), EnumSet.noneOf(AddBlockFlag.class)));
      eq(Arrays.asList("dn5.example.com"), got);
      // the pytest checks the request: chosen [dn2, dn4], both also excluded
    });
    test("request JSON names the holders only when there are any", () -> {
      PlacementDecider.Request r = new PlacementDecider.Request("", 1, Arrays.asList("h1"), 1L, Arrays.asList("h1"));
      eq(Arrays.asList("h1"), ((Map<?, ?>) MiniJson.parse(r.toJson())).get("chosen"));
      check(!new PlacementDecider.Request("", 1, Arrays.asList("h1"), 1L).toJson().contains("chosen"), "chosen sent");
    });
    test("shim passes the block size it is asked for", () -> {
      HarvestBlockPlacementPolicy p = shim("good-excluding");
      p.chooseTarget("/warehouse/t/part-64m", 2, null, new ArrayList<DatanodeStorageInfo>(), false,
          new HashSet<Node>(), 64L << 20, new BlockStoragePolicy("HOT"), EnumSet.noneOf(AddBlockFlag.class));
      // the pytest checks the request the service saw: block_size 67108864 for this path
    });
    test("shim logs a service outage at WARN once, then a recovery line (real HTTP)", () -> {
      List<String> lines = new ArrayList<String>();
      FakeClock clock = new FakeClock();
      extraConf.put(HarvestBlockPlacementPolicy.COOLDOWN_KEY, "0"); // ask every block
      HarvestBlockPlacementPolicy down = shim(downUrl);
      extraConf.clear();
      down.setFallbackLog(new FallbackLog(sink(lines), clock, 60000));
      for (int i = 0; i < 20; i++) {
        eq(STOCK, hosts(place(down, new HashSet<Node>())));
      }
      eq(1, lines.size());
      check(lines.get(0).startsWith("WARN harvest placement service unavailable") && lines.get(0).contains(
          "Connection refused"), lines.get(0));
      clock.now.addAndGet(60000);
      place(down, new HashSet<Node>());
      eq(2, lines.size());
      check(lines.get(1).contains(": 20 block(s) in the last 60000 ms"), lines.get(1));
      HarvestBlockPlacementPolicy up = shim("good");
      FallbackLog shared = new FallbackLog(sink(lines), clock, 60000);
      down.setFallbackLog(shared);
      up.setFallbackLog(shared);
      place(down, new HashSet<Node>());
      clock.now.addAndGet(5000);
      place(up, new HashSet<Node>());
      place(up, new HashSet<Node>());
      eq(4, lines.size());
      check(lines.get(3).startsWith("INFO harvest placement service answering again after 5000 ms; 1 block(s)"),
          lines.get(3));
    });
    test("shim caches a 409 so re-replication retries do not call the service (real HTTP)", () -> {
      List<String> lines = new ArrayList<String>();
      HarvestBlockPlacementPolicy p = shim("conflict");
      p.setFallbackLog(new FallbackLog(sink(lines), new FakeClock(), 60000));
      for (int i = 0; i < 30; i++) { // 30 retries of an under-replicated block with 1 live replica
        Set<Node> excluded = new HashSet<Node>();
        excluded.add(nodes.get(5));
        p.chooseTarget("/tmp/job.jar", 9, null, new ArrayList<DatanodeStorageInfo>(), false, excluded, 128L << 20,
            new BlockStoragePolicy("HOT"), EnumSet.noneOf(AddBlockFlag.class));
      }
      eq(1, lines.size());
      check(lines.get(0).contains("409"), lines.get(0));
      // the pytest checks that the service saw exactly one /conflict/ request
    });
    test("shim drops the excess replica the service names, else the stock choice", () -> {
      HarvestBlockPlacementPolicy p = shim(null);
      final String[] named = {"dn4.example.com"};
      p.setDecider(new PlacementDecider(new PlacementDecider.Service() {
        @Override
        public PlacementDecider.Answer choose(PlacementDecider.Request request) {
          return null;
        }

        @Override
        public String chooseDrop(List<String> holders) {
          return named[0];
        }
      }, 1000L, new FakeClock()));
      List<DatanodeStorageInfo> more = new ArrayList<DatanodeStorageInfo>();
      more.add(new DatanodeStorageInfo(nodes.get(1)));
      more.add(new DatanodeStorageInfo(nodes.get(3)));
      List<DatanodeStorageInfo> one = new ArrayList<DatanodeStorageInfo>();
      one.add(new DatanodeStorageInfo(nodes.get(0)));
      Map<String, List<DatanodeStorageInfo>> racks = new HashMap<String, List<DatanodeStorageInfo>>();
      List<StorageType> types = new ArrayList<StorageType>(Arrays.asList(StorageType.DISK));
      // the stock stand-in would take dn2 (the first of the rack holding two)
      eq("dn4.example.com", hosts(new DatanodeStorageInfo[] {p.chooseReplicaToDelete(more, one, types, racks)}).get(0));
      eq(0, types.size());
      named[0] = "dn1.example.com"; // alone on its rack: still the one named
      types.add(StorageType.DISK);
      eq("dn1.example.com", hosts(new DatanodeStorageInfo[] {p.chooseReplicaToDelete(more, one, types, racks)}).get(0));
      named[0] = "dn6.example.com"; // not a holder: the stock choice
      types.add(StorageType.DISK);
      eq("dn2.example.com", hosts(new DatanodeStorageInfo[] {p.chooseReplicaToDelete(more, one, types, racks)}).get(0));
    });
    test("shim without a configured URL is the stock policy", () -> {
      int before = BlockPlacementPolicyDefault.stockCalls;
      eq(STOCK, hosts(place(shim(null), new HashSet<Node>())));
      eq(before + 1, BlockPlacementPolicyDefault.stockCalls);
    });
    test("shim ignores decommissioned and in-maintenance nodes as targets", () -> {
      HarvestBlockPlacementPolicy p = shim("good");
      nodes.get(4).decommissioned = true; // dn5 is one of the service's targets
      eq(STOCK, hosts(place(p, new HashSet<Node>())));
    });
  }

  /**
   * End to end against a real placement service: {@code --e2e URL TOKEN-FILE BLOCKS}. Places
   * BLOCKS blocks written from dn1 and prints {@code CHOSEN h1,h2,h3} per block for the caller
   * to check against the service's view of the nodes.
   */
  private static void endToEnd(String url, String tokenPath, int blocks) {
    tokenFile = tokenPath;
    HarvestBlockPlacementPolicy p = shim(url);
    for (int i = 0; i < blocks; i++) {
      DatanodeStorageInfo[] result = p.chooseTarget("/e2e/part-" + i, 3, nodes.get(0),
          new ArrayList<DatanodeStorageInfo>(), false, new HashSet<Node>(), 128L << 20,
          new BlockStoragePolicy("HOT"), EnumSet.noneOf(AddBlockFlag.class));
      StringBuilder line = new StringBuilder("CHOSEN ");
      for (String h : hosts(result)) {
        line.append(line.length() > 7 ? "," : "").append(h);
      }
      System.out.println(line);
    }
  }

  public static void main(String[] args) throws Exception {
    if (args.length > 0 && "--e2e".equals(args[0])) {
      endToEnd(args[1], args[2], Integer.parseInt(args[3]));
      return;
    }
    base = args[0];
    tokenFile = args[1];
    downUrl = args[2] + "/v1/blocks/place";
    deciderTests();
    clientTests();
    shimTests();
    System.out.println(failed == 0 ? "ALL PASSED" : failed + " FAILED");
    System.exit(failed == 0 ? 0 : 1);
  }
}
