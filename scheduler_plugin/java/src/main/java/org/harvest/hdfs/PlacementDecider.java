package org.harvest.hdfs;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Collections;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The shim's decision logic, free of Hadoop types so it can be unit-tested anywhere.
 *
 * <p>For one block:
 * <ol>
 *   <li>While the service is suspended (it failed less than {@code cooldownMs} ago), use the stock
 *       choice without asking: a dead service costs one timeout per cooldown, not one per block.</li>
 *   <li>While a refusal of the same shape is cached (the service answered HTTP 409 for the same
 *       replica count and excluded-set size less than {@code refusalCooldownMs} ago), use the
 *       stock choice without asking: the NameNode's re-replication loop retries an
 *       under-replicated block about once a second, and asking each time only repeats the 409.</li>
 *   <li>Ask the service. A failure (connection refused, timeout, HTTP 5xx, unparsable answer)
 *       suspends it for {@code cooldownMs} and falls back to the stock choice; a refusal of this
 *       request (HTTP 4xx) falls back for this block only (a 409 is also cached, see above).</li>
 *   <li>Validate the answer against the live DataNodes: at least {@code replicas} targets (or, in
 *       a <em>short</em> answer, at least one: the service has fewer usable nodes than replicas),
 *       all distinct, all live, none excluded. An invalid answer falls back to the stock choice
 *       for this block only (the service may briefly see another set of nodes than the NameNode).</li>
 *   <li>Otherwise use the first {@code replicas} targets, in the service's order. A short answer
 *       places fewer replicas than asked, all on usable nodes; HDFS accepts that (a new block
 *       needs {@code dfs.namenode.replication.min}, 1) and re-replicates the rest later, when the
 *       service will answer again, with a 409 once no usable node is left, which is cached.</li>
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
    /** Nodes already holding a replica of the block (re-replication); also in {@code excluded}. */
    public final List<String> chosen;

    public Request(String writer, int replicas, Collection<String> excluded, long blockSize) {
      this(writer, replicas, excluded, blockSize, Collections.<String>emptyList());
    }

    public Request(String writer, int replicas, Collection<String> excluded, long blockSize,
        Collection<String> chosen) {
      this.writer = writer == null ? "" : writer;
      this.replicas = replicas;
      this.excluded = Collections.unmodifiableList(new ArrayList<String>(excluded));
      this.blockSize = blockSize;
      this.chosen = Collections.unmodifiableList(new ArrayList<String>(chosen));
    }

    /**
     * {@code {"writer", "replicas", "excluded", "block_size"}}, plus {@code "chosen"} when the block
     * already has replicas: the body of POST /v1/blocks/place.
     */
    public String toJson() {
      return "{\"writer\":" + MiniJson.quote(writer) + ",\"replicas\":" + replicas + ",\"excluded\":"
          + MiniJson.quoteAll(excluded) + ",\"block_size\":" + blockSize
          + (chosen.isEmpty() ? "" : ",\"chosen\":" + MiniJson.quoteAll(chosen)) + "}";
    }
  }

  /**
   * The service's answer: {@code {"targets": [...], "relaxed": bool, "reason": str, "short": bool}}.
   * {@code short} means fewer usable nodes than replicas: the targets are all the usable ones.
   */
  public static final class Answer {
    public final List<String> targets;
    public final boolean relaxed;
    public final String reason;
    public final boolean isShort;

    public Answer(List<String> targets, boolean relaxed, String reason) {
      this(targets, relaxed, reason, false);
    }

    public Answer(List<String> targets, boolean relaxed, String reason, boolean isShort) {
      this.targets = targets;
      this.relaxed = relaxed;
      this.reason = reason == null ? "" : reason;
      this.isShort = isShort;
    }
  }

  /**
   * The service understood the request and refused it (HTTP 4xx, e.g. a writer it does not know):
   * this block goes the stock way, but the service is not suspended.
   */
  public static final class RejectedException extends IOException {
    private static final long serialVersionUID = 1L;
    /** The HTTP status (4xx); 409 means the service cannot place this many replicas now. */
    public final int status;

    public RejectedException(int status, String message) {
      super(message);
      this.status = status;
    }
  }

  /** HTTP status of "the replication asked for exceeds the usable nodes": cached per shape. */
  public static final int CONFLICT = 409;

  /** Where answers come from (the HTTP client in production, fakes in tests). */
  public interface Service {
    Answer choose(Request request) throws IOException;

    /**
     * Which of a block's {@code holders} to drop when the NameNode deletes an excess replica
     * ({@code POST /v1/blocks/drop}), or null for no preference (the stock choice).
     */
    default String chooseDrop(List<String> holders) throws IOException {
      return null;
    }
  }

  /** Injectable clock (milliseconds). */
  public interface Clock {
    long nowMs();
  }

  /** Why a block went the way it did (the shim logs by kind, see {@link FallbackLog}). */
  public enum Kind {
    /** The service's targets are used. */
    SERVICE,
    /** The call failed (down, slow, 5xx, garbage): the service is now suspended. */
    FAILED,
    /** Not asked: the service is suspended after a recent failure. */
    SUSPENDED,
    /** The service refused this request (HTTP 4xx). */
    REFUSED,
    /** Not asked: the service refused a request of the same shape recently (HTTP 409). */
    REFUSAL_CACHED,
    /** The answer does not fit the NameNode's view (dead, excluded, duplicate or too few targets). */
    INVALID
  }

  /** Outcome for one block: the service's targets, or the stock choice with the reason. */
  public static final class Decision {
    public final boolean useService;
    public final Kind kind;
    public final List<String> targets;
    public final String reason;

    private Decision(Kind kind, List<String> targets, String reason) {
      this.useService = kind == Kind.SERVICE;
      this.kind = kind;
      this.targets = targets;
      this.reason = reason;
    }

    static Decision stock(Kind kind, String reason) {
      return new Decision(kind, Collections.<String>emptyList(), reason);
    }

    @Override
    public String toString() {
      return useService ? "service" + targets : "stock(" + reason + ")";
    }
  }

  private final Service service;
  private final long cooldownMs;
  private final long refusalCooldownMs;
  private final Clock clock;
  private final AtomicLong suspendedUntilMs = new AtomicLong(Long.MIN_VALUE);
  /** "replicas/excluded-count" -> until when (ms) a 409 for that shape is reused. */
  private final ConcurrentHashMap<String, Long> refusedUntilMs = new ConcurrentHashMap<String, Long>();
  private final ConcurrentHashMap<String, String> refusalReason = new ConcurrentHashMap<String, String>();
  private static final int MAX_REFUSAL_SHAPES = 1024;

  public PlacementDecider(Service service, long cooldownMs, Clock clock) {
    this(service, cooldownMs, 0L, clock);
  }

  /**
   * @param cooldownMs how long a failed service is not asked
   * @param refusalCooldownMs how long an HTTP 409 is reused for requests of the same shape
   *     (replica count, excluded-set size); 0 disables the cache
   */
  public PlacementDecider(Service service, long cooldownMs, long refusalCooldownMs, Clock clock) {
    this.service = service;
    this.cooldownMs = cooldownMs;
    this.refusalCooldownMs = refusalCooldownMs;
    this.clock = clock;
  }

  static String shape(Request request) {
    return request.replicas + "/" + request.excluded.size();
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
      return Decision.stock(Kind.SUSPENDED, "service suspended after a failure");
    }
    String shape = shape(request);
    Long until = refusedUntilMs.get(shape);
    if (until != null) {
      if (clock.nowMs() < until) {
        return Decision.stock(Kind.REFUSAL_CACHED, "service refused " + request.replicas + " replica(s) with "
            + request.excluded.size() + " excluded less than " + refusalCooldownMs + " ms ago: "
            + refusalReason.get(shape));
      }
      refusedUntilMs.remove(shape, until);
    }
    Answer answer;
    try {
      answer = service.choose(request);
    } catch (RejectedException ex) {
      if (ex.status == CONFLICT && refusalCooldownMs > 0) {
        if (refusedUntilMs.size() >= MAX_REFUSAL_SHAPES) {
          refusedUntilMs.clear(); // bounded: shapes are few in practice, never let them grow without end
        }
        refusalReason.put(shape, ex.getMessage());
        refusedUntilMs.put(shape, clock.nowMs() + refusalCooldownMs);
      }
      return Decision.stock(Kind.REFUSED, "service refused: " + ex.getMessage());
    } catch (IOException | RuntimeException ex) {
      suspendedUntilMs.set(clock.nowMs() + cooldownMs);
      return Decision.stock(Kind.FAILED, "service failed: " + ex);
    }
    String invalid = validate(answer, request, liveHosts);
    if (invalid != null) {
      return Decision.stock(Kind.INVALID, "invalid answer: " + invalid);
    }
    int n = Math.min(request.replicas, answer.targets.size());
    return new Decision(Kind.SERVICE, Collections.unmodifiableList(
        new ArrayList<String>(answer.targets.subList(0, n))), answer.reason);
  }

  /**
   * The holder the service wants dropped among {@code holders}, or null (service suspended,
   * failed, refused or no preference: the stock choice). A failure suspends the service as in
   * {@link #decide}; an answer naming no holder counts as no preference.
   */
  public String chooseDrop(List<String> holders) {
    if (suspended() || holders.isEmpty()) {
      return null;
    }
    String drop;
    try {
      drop = service.chooseDrop(holders);
    } catch (RejectedException ex) {
      return null;
    } catch (IOException | RuntimeException ex) {
      suspendedUntilMs.set(clock.nowMs() + cooldownMs);
      return null;
    }
    if (drop == null) {
      return null;
    }
    for (String h : holders) {
      if (key(h).equals(key(drop))) {
        return key(drop);
      }
    }
    return null;
  }

  /** Null when the answer is usable, else why not. */
  static String validate(Answer answer, Request request, Set<String> liveHosts) {
    if (answer == null || answer.targets == null) {
      return "no targets";
    }
    if (answer.targets.size() < request.replicas && !(answer.isShort && !answer.targets.isEmpty())) {
      return answer.targets.size() + " targets for " + request.replicas + " replicas"
          + (answer.isShort ? " (short)" : "") + (answer.reason.isEmpty() ? "" : " (" + answer.reason + ")");
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
    for (String t : answer.targets.subList(0, Math.min(request.replicas, answer.targets.size()))) {
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
