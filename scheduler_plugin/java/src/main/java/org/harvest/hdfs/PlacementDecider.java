package org.harvest.hdfs;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The shim's decision logic, free of Hadoop types so it can be unit-tested anywhere.
 *
 * <p>For one block:
 * <ol>
 *   <li>While the service is suspended (it failed less than {@code cooldownMs} ago), use the stock
 *       choice without asking: a dead service costs one timeout per cooldown, not one per block.</li>
 *   <li>Ask the service. A failure (connection refused, timeout, HTTP 5xx, unparsable answer)
 *       suspends it for {@code cooldownMs} and falls back to the stock choice; a refusal of this
 *       request (HTTP 4xx) falls back for this block only.</li>
 *   <li>Validate the answer against the live DataNodes: at least {@code replicas} targets, all
 *       distinct, all live, none excluded. An invalid answer falls back to the stock choice for
 *       this block only (the service may briefly see another set of nodes than the NameNode).</li>
 *   <li>Otherwise use the first {@code replicas} targets, in the service's order.</li>
 * </ol>
 * Thread-safe: NameNode handler threads call {@link #decide} concurrently.
 */
public final class PlacementDecider {

  /** What the shim asks for one block. */
  public static final class Request {
    public final String writer;
    public final int replicas;
    public final List<String> excluded;
    public final long blockSize;

    public Request(String writer, int replicas, Collection<String> excluded, long blockSize) {
      this.writer = writer == null ? "" : writer;
      this.replicas = replicas;
      this.excluded = Collections.unmodifiableList(new ArrayList<String>(excluded));
      this.blockSize = blockSize;
    }

    /** {@code {"writer", "replicas", "excluded", "block_size"}}, the body of POST /v1/blocks/place. */
    public String toJson() {
      return "{\"writer\":" + MiniJson.quote(writer) + ",\"replicas\":" + replicas + ",\"excluded\":"
          + MiniJson.quoteAll(excluded) + ",\"block_size\":" + blockSize + "}";
    }
  }

  /** The service's answer: {@code {"targets": [...], "relaxed": bool, "reason": str}}. */
  public static final class Answer {
    public final List<String> targets;
    public final boolean relaxed;
    public final String reason;

    public Answer(List<String> targets, boolean relaxed, String reason) {
      this.targets = targets;
      this.relaxed = relaxed;
      this.reason = reason == null ? "" : reason;
    }
  }

  /**
   * The service understood the request and refused it (HTTP 4xx, e.g. a writer it does not know):
   * this block goes the stock way, but the service is not suspended.
   */
  public static final class RejectedException extends IOException {
    private static final long serialVersionUID = 1L;

    public RejectedException(String message) {
      super(message);
    }
  }

  /** Where answers come from (the HTTP client in production, fakes in tests). */
  public interface Service {
    Answer choose(Request request) throws IOException;
  }

  /** Injectable clock (milliseconds). */
  public interface Clock {
    long nowMs();
  }

  /** Outcome for one block: the service's targets, or the stock choice with the reason. */
  public static final class Decision {
    public final boolean useService;
    public final List<String> targets;
    public final String reason;

    private Decision(boolean useService, List<String> targets, String reason) {
      this.useService = useService;
      this.targets = targets;
      this.reason = reason;
    }

    static Decision stock(String reason) {
      return new Decision(false, Collections.<String>emptyList(), reason);
    }

    @Override
    public String toString() {
      return useService ? "service" + targets : "stock(" + reason + ")";
    }
  }

  private final Service service;
  private final long cooldownMs;
  private final Clock clock;
  private final AtomicLong suspendedUntilMs = new AtomicLong(Long.MIN_VALUE);

  public PlacementDecider(Service service, long cooldownMs, Clock clock) {
    this.service = service;
    this.cooldownMs = cooldownMs;
    this.clock = clock;
  }

  /** Host names are compared case-insensitively, as DNS does. */
  static String key(String host) {
    return host == null ? "" : host.trim().toLowerCase(Locale.ROOT);
  }

  public boolean suspended() {
    return clock.nowMs() < suspendedUntilMs.get();
  }

  public Decision decide(Request request, Set<String> liveHosts) {
    if (suspended()) {
      return Decision.stock("service suspended after a failure");
    }
    Answer answer;
    try {
      answer = service.choose(request);
    } catch (RejectedException ex) {
      return Decision.stock("service refused: " + ex.getMessage());
    } catch (IOException | RuntimeException ex) {
      suspendedUntilMs.set(clock.nowMs() + cooldownMs);
      return Decision.stock("service failed: " + ex);
    }
    String invalid = validate(answer, request, liveHosts);
    if (invalid != null) {
      return Decision.stock("invalid answer: " + invalid);
    }
    return new Decision(true, Collections.unmodifiableList(
        new ArrayList<String>(answer.targets.subList(0, request.replicas))), answer.reason);
  }

  /** Null when the answer is usable, else why not. */
  static String validate(Answer answer, Request request, Set<String> liveHosts) {
    if (answer == null || answer.targets == null) {
      return "no targets";
    }
    if (answer.targets.size() < request.replicas) {
      return answer.targets.size() + " targets for " + request.replicas + " replicas"
          + (answer.reason.isEmpty() ? "" : " (" + answer.reason + ")");
    }
    Set<String> live = new HashSet<String>();
    for (String h : liveHosts) {
      live.add(key(h));
    }
    Set<String> excluded = new HashSet<String>();
    for (String h : request.excluded) {
      excluded.add(key(h));
    }
    Set<String> seen = new HashSet<String>();
    for (String t : answer.targets.subList(0, request.replicas)) {
      String k = key(t);
      if (!seen.add(k)) {
        return "target " + t + " listed twice";
      }
      if (!live.contains(k)) {
        return "target " + t + " is not a live DataNode";
      }
      if (excluded.contains(k)) {
        return "target " + t + " is excluded";
      }
    }
    return null;
  }
}
