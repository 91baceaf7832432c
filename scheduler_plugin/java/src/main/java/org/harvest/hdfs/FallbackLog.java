package org.harvest.hdfs;

/**
 * What the shim logs about blocks that went the stock way, rate-limited so that an outage of the
 * placement service is visible at INFO level without a line per block.
 *
 * <p>Two channels, each logged at WARN at most once per {@code intervalMs} with the number of
 * blocks since its last line and the latest reason:
 * <ul>
 *   <li><em>outage</em>: the service failed (down, slow, HTTP 5xx, garbage) or is suspended after a
 *       failure. The first failure after a healthy period is logged at once; when the service
 *       answers again (any answer, even a refusal) one INFO line says so, with how long it was
 *       down and how many blocks were placed by the stock policy meanwhile;</li>
 *   <li><em>refusal</em>: the service answered but its answer was not used (HTTP 4xx, a cached
 *       409, or targets the NameNode cannot use).</li>
 * </ul>
 * Hadoop-free and thread-safe (NameNode handler threads call {@link #record} concurrently).
 */
final class FallbackLog {
  /** Where lines go (slf4j in the NameNode, a list in tests). */
  interface Sink {
    void warn(String message);

    void info(String message);
  }

  private static final class Channel {
    long count;
    long lastWarnMs = Long.MIN_VALUE;
    String lastReason = "";
  }

  private final Sink sink;
  private final PlacementDecider.Clock clock;
  private final long intervalMs;
  private final Channel outage = new Channel();
  private final Channel refusal = new Channel();
  private boolean down;
  private long downSinceMs;
  private long downBlocks;

  FallbackLog(Sink sink, PlacementDecider.Clock clock, long intervalMs) {
    this.sink = sink;
    this.clock = clock;
    this.intervalMs = intervalMs;
  }

  synchronized void record(PlacementDecider.Decision decision) {
    long now = clock.nowMs();
    switch (decision.kind) {
      case FAILED:
      case SUSPENDED:
        if (!down) {
          down = true;
          downSinceMs = now;
          downBlocks = 0;
        }
        downBlocks++;
        note(outage, now, decision.reason, "harvest placement service unavailable, stock placement");
        return;
      case SERVICE:
        answered(now);
        return;
      default:
        answered(now);
        note(refusal, now, decision.reason, "harvest placement service answer not used, stock placement");
    }
  }

  /** The service's targets failed the stock checks for one block (refusal channel). */
  synchronized void recordUnusable(String reason) {
    note(refusal, clock.nowMs(), reason, "harvest placement service answer not used, stock placement");
  }

  private void answered(long now) {
    if (!down) {
      return;
    }
    down = false;
    sink.info("harvest placement service answering again after " + (now - downSinceMs) + " ms; "
        + downBlocks + " block(s) were placed by the stock policy meanwhile");
    outage.count = 0;
    outage.lastWarnMs = Long.MIN_VALUE; // the next outage is reported at once
  }

  private void note(Channel ch, long now, String reason, String what) {
    ch.count++;
    ch.lastReason = reason;
    if (ch.lastWarnMs != Long.MIN_VALUE && now - ch.lastWarnMs < intervalMs) {
      return;
    }
    String since = ch.lastWarnMs == Long.MIN_VALUE ? "" : " in the last " + (now - ch.lastWarnMs) + " ms";
    sink.warn(what + ": " + ch.count + " block(s)" + since + "; latest: " + ch.lastReason
        + " (next such line in " + intervalMs + " ms at the earliest)");
    ch.count = 0;
    ch.lastWarnMs = now;
  }
}
