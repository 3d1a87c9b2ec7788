"""The one frozen Settings object and its sections, each validated in `__post_init__`."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

from gateway.config.redact import _redact
from gateway.config.redisurl import RedisTarget, redis_target
from gateway.config.units import ConfigError, setting

Access = Literal["read", "readwrite"]


@dataclass(frozen=True, slots=True)
class OriginSettings:
    """The real bucket's endpoint and the gateway's own credentials for it."""

    endpoint: str = setting("https://s3.amazonaws.com", "URL of the real S3 service, http(s)://host[:port].")
    region: str = setting("us-east-1", "Region the gateway signs its origin requests for.")
    access_key: str = setting("", "The gateway's own access key for the origin; clients never see it.")
    secret_key: str = setting("", "The secret key that goes with `origin.access_key`.", secret=True)
    addressing: Literal["path", "virtual"] = setting(
        "path", "How the gateway addresses the origin: `path` (endpoint/bucket/key) or `virtual` (bucket.host/key).")
    connect_timeout: float = setting(5.0, "Timeout for opening a connection to the origin.")
    read_timeout: float = setting(30.0, "Timeout for each read from an origin connection.")
    max_connections: int = setting(
        256, "Most connections to the origin at once, for the reads of blocks, HEADs and listings "
             "(gateway.rangeclient) and for every other request (aiohttp) each.")
    retries: int = setting(2, "Retries of a transport failure or a 500/503 answer from the origin.")

    def __post_init__(self) -> None:
        if not re.match(r"^https?://[^/]+/?$", self.endpoint):
            raise ConfigError(f"origin.endpoint: expected http(s)://host[:port], got {self.endpoint!r}")
        if self.addressing not in ("path", "virtual"):
            raise ConfigError(f"origin.addressing: 'path' or 'virtual', got {self.addressing!r}")
        if self.connect_timeout <= 0 or self.read_timeout <= 0:
            raise ConfigError("origin timeouts must be positive")


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Where the S3 endpoint listens and how it reads requests."""

    host: str = setting("127.0.0.1", "Address the S3 endpoint listens on (`0.0.0.0`: every interface).")
    port: int = setting(8080, "TCP port of the S3 endpoint (and of the admin API under `admin.path`).")
    domain: str = setting(
        "", "Virtual-hosted-style addressing: requests to `<bucket>.<domain>`; empty means path-style only.")
    max_object_size: int = setting(5 * 1024**3, "Largest body of one PutObject or UploadPart (S3's single-PUT limit).")
    spool_memory: int = setting(4 * 1024**2, "Request bodies above this are spooled to a temporary file while verified.")
    spool_dir: str = setting("", "Folder for spooled request bodies; empty: the system temporary folder.")
    max_xml_size: int = setting(2 * 1024**2, "Largest XML request body (DeleteObjects, CompleteMultipartUpload, ...).")
    tls_cert_file: str = setting(
        "", "PEM certificate chain: with `tls_key_file`, the S3 endpoint and the admin API speak HTTPS only "
            "(TLS 1.2 or later); SIGHUP reloads both files without dropping connections.")
    tls_key_file: str = setting("", "PEM private key of `tls_cert_file`.")
    max_connections: int = setting(
        4096, "Most client connections open at once (idle keep-alive ones count). A connection past it is "
              "answered 503 SlowDown and closed; the open-files limit is raised to fit it at start.")
    head_timeout: float = setting(
        30.0, "Time a client has to send a request's line and headers, from its first byte (or from "
              "connecting); past it the connection is closed (400 RequestTimeout if it had started).")
    max_head_size: int = setting(
        64 * 1024, "Largest request line plus headers; a larger one is answered 400 "
                   "RequestHeaderSectionTooLarge and the connection closed.")
    keepalive_timeout: float = setting(
        5.0, "An idle keep-alive connection is closed after this long (keep it above 3s: peers reuse "
             "idle connections for 3s).")
    stall_timeout: float = setting(
        60.0, "A client that sends none of a request body it announced, or reads less than 48KiB of an "
              "answer, for this long is disconnected (its read-buffer share and its task are freed).")
    hit_path: bool = setting(
        True, "Answer GETs and HEADs of objects whose metadata is fresh and whose bytes one block holds in "
              "memory or in the page cache inside the HTTP server, without the ASGI app (the same answer, "
              "counted and logged alike, at a fraction of the CPU). A request it answered that arrives again "
              "byte for byte (a presigned URL, a client's retry) is answered without being parsed or its "
              "signature checked again, while the object and the signature's time window still hold. In a "
              "fleet it also answers a GET of one block another node owns (once the block came) and the peer "
              "API's requests for blocks this node holds, both also as kept when they arrive again byte for "
              "byte. false sends every request through the app.")
    shutdown_timeout: float = setting(
        30.0, "On SIGTERM, how long requests in flight may finish before they are cancelled and the node "
              "leaves the fleet and exits.")
    workers: int = setting(
        0, "Processes that serve the port together, one cache (`0`: one per usable core, within the cgroup's "
           "CPU limit). With more than one, a supervisor starts them, restarts one that dies and passes SIGTERM "
           "and SIGHUP on; the memory tier then lives in files on /dev/shm (or the temporary folder), which "
           "must have room for `cache.memory_quota`, and `cache.read_buffer` is shared out among them.")
    run_folder: str = setting(
        "", "With several workers: the folder (on tmpfs) each node makes its private folder in, which holds "
            "the memory tier's block files; empty: /dev/shm, else the temporary folder. A tmpfs mounted with "
            "`huge=within_size` keeps each block in large pages: writing a cold block there costs about a "
            "fifth of the CPU (docs/benchmarks.md, cold reads).")
    worker_start_timeout: float = setting(
        60.0, "With several workers: a worker that does not serve this long after it was started is killed "
              "and started again (after a pause that doubles each time it fails in a row). Raise it where "
              "a start is slow (a loaded machine, a profiler such as valgrind).")

    def __post_init__(self) -> None:
        if self.worker_start_timeout <= 0:
            raise ConfigError(f"server.worker_start_timeout: must be positive, got {self.worker_start_timeout}")
        if self.workers < 0:
            raise ConfigError(f"server.workers: 0 (one per core) or more, got {self.workers}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"server.port: out of range: {self.port}")
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise ConfigError("server.tls_cert_file and server.tls_key_file: set both, or neither")
        if self.max_connections < 1 or self.max_head_size < 1024:
            raise ConfigError("server.max_connections: at least 1; server.max_head_size: at least 1KiB")
        if min(self.head_timeout, self.keepalive_timeout, self.stall_timeout, self.shutdown_timeout) <= 0:
            raise ConfigError("server.head_timeout, keepalive_timeout, stall_timeout and shutdown_timeout "
                              "must be positive")


@dataclass(frozen=True, slots=True)
class Grant:
    """Access to one bucket, optionally narrowed to keys under a prefix."""

    bucket: str = setting(help="Bucket name; `*` means every bucket.")
    prefix: str = setting("", "Only keys under this prefix; empty: the whole bucket.")
    access: Access = setting("read", "`read` (GET, HEAD, LIST) or `readwrite` (also PUT, DELETE, multipart).")

    def __post_init__(self) -> None:
        if self.access not in ("read", "readwrite"):
            raise ConfigError(f"grant access must be 'read' or 'readwrite', got {self.access!r}")
        if not self.bucket:
            raise ConfigError("grant.bucket must not be empty ('*' means every bucket)")


@dataclass(frozen=True, slots=True)
class User:
    """One client identity: the S3 credentials it signs with and what it may touch."""

    access_key: str = setting(help="The access key the client signs with.")
    secret_key: str = setting(help="The client's secret key.", secret=True)
    grants: tuple[Grant, ...] = setting((), "Buckets and prefixes this user may read or write.")
    admin: bool = setting(False, "Every bucket, and bucket configuration calls (policy, ACL, lifecycle, ...) "
                                 "that the gateway passes through with its own origin credentials.")

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ConfigError("every auth.users entry needs access_key and secret_key")


@dataclass(frozen=True, slots=True)
class AuthSettings:
    """Who may use the S3 endpoint: users with their grants, and buckets open to anonymous reads."""

    users: tuple[User, ...] = setting((), "The users; in an env var as a JSON list of tables.")
    anonymous_read: tuple[str, ...] = setting((), "Buckets that anyone may read without credentials.")
    max_clock_skew: float = setting(900.0, "How far a request's signing time may be from the gateway's clock.")

    def __post_init__(self) -> None:
        keys = [u.access_key for u in self.users]
        if len(keys) != len(set(keys)):
            raise ConfigError("auth.users: access keys must be unique")


@dataclass(frozen=True, slots=True)
class DiskTierSettings:
    """One cache folder: Alluxio's tieredstore.levelN.dirs.path / .quota / .mediumtype."""

    path: str = setting(help="Folder of the tier; created if missing (Alluxio's tieredstore.levelN.dirs.path).")
    quota: int = setting(help="Most bytes of blocks kept in the folder (tieredstore.levelN.dirs.quota).")
    medium: Literal["ssd", "hdd"] = setting("ssd", "`ssd` or `hdd` (tieredstore.levelN.dirs.mediumtype).")

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigError("cache.disk: every disk tier needs a path")
        if self.quota <= 0:
            raise ConfigError(f"cache.disk {self.path}: quota must be positive")
        if self.medium not in ("ssd", "hdd"):
            raise ConfigError(f"cache.disk {self.path}: medium is 'ssd' or 'hdd', got {self.medium!r}")


@dataclass(frozen=True, slots=True)
class PrefixRule:
    """A bucket/prefix, with a TTL in seconds for `cache.ttl` rules."""

    bucket: str = setting(help="Bucket the rule applies to.")
    prefix: str = setting("", "Keys under this prefix; empty: the whole bucket.")
    seconds: float = setting(0.0, "For `cache.ttl`: blocks are freed this long after they were cached.")


@dataclass(frozen=True, slots=True)
class CacheSettings:
    """The block cache: tiers, block size, eviction policy, promotion, pins and TTLs."""

    block_size: int = setting(1024**2, "Objects are cached as blocks of this size (64KiB to 64MiB); see "
                              "docs/benchmarks.md for why 1MiB.")
    policy: Literal["lru", "s3fifo"] = setting("s3fifo", "Eviction policy of every tier: `lru` or `s3fifo`.")
    promote: bool = setting(True, "CACHE_PROMOTE (true): a hit in a lower tier is copied up to memory; "
                                  "CACHE (false): it is served from where it is.")
    memory_quota: int = setting(1024**3, "Bytes of blocks kept in memory; 0 and no disk tiers: no block cache. "
                                "The parts of blocks cold reads bring (a read's bytes rounded out to 64 KiB, "
                                "when blocks are larger) are kept in it too (with several workers, by the "
                                "block's owner worker).")
    disk: tuple[DiskTierSettings, ...] = setting(
        (), "Disk tiers below memory, in order; evictions demote downwards. In an env var as a JSON list.")
    readahead_blocks: int = setting(16, "Blocks after a sequential reader's last range that are fetched ahead, "
                                        "in one origin request; and how far ahead of its reader a cold read's "
                                        "origin answer is read (at least 4 blocks).")
    shadow_rate: float = setting(
        0.01, "Share of objects (SHARDS sampling) fed to shadow models of this node's store at 1x, 2x and 4x "
              "its quotas, whose hit ratios the admin stats and metrics show (what more cache would buy); "
              "0 turns it off.")
    read_buffer: int = setting(
        96 * 1024**2, "Bytes of blocks that reads in flight hold besides the memory tier (being fetched, read "
                      "from disk, sent): past it readahead is skipped and new block reads wait their turn.")
    pinned: tuple[PrefixRule, ...] = setting((), "Bucket/prefix rules whose blocks are never evicted.")
    ttl: tuple[PrefixRule, ...] = setting((), "Bucket/prefix rules whose blocks are freed `seconds` after caching.")
    cache_through: bool = setting(False, "Writes also fill the cache (Alluxio's CACHE_THROUGH), so a read after "
                                         "a write hits; false: THROUGH.")

    def __post_init__(self) -> None:
        if not 64 * 1024 <= self.block_size <= 64 * 1024**2:
            raise ConfigError(f"cache.block_size: between 64KiB and 64MiB, got {self.block_size}")
        if self.policy not in ("lru", "s3fifo"):
            raise ConfigError(f"cache.policy: 'lru' or 's3fifo', got {self.policy!r}")
        if self.memory_quota < 0 or self.readahead_blocks < 0:
            raise ConfigError("cache.memory_quota and cache.readahead_blocks must not be negative")
        if not 0 <= self.shadow_rate <= 1:
            raise ConfigError(f"cache.shadow_rate: between 0 and 1, got {self.shadow_rate}")
        if self.read_buffer < self.block_size:
            raise ConfigError(f"cache.read_buffer: at least one block ({self.block_size}), got {self.read_buffer}")
        if any(rule.seconds <= 0 for rule in self.ttl):
            raise ConfigError("cache.ttl: every rule needs seconds > 0")


@dataclass(frozen=True, slots=True)
class MetadataSettings:
    """The object-metadata cache (Alluxio's alluxio.user.metadata.cache.*)."""

    max_entries: int = setting(100_000, "Most objects whose metadata is cached in process (metadata.cache.max.size).")
    ttl: float = setting(60.0, "Past it, cached metadata is revalidated with a conditional HEAD "
                               "(metadata.cache.expiration.time), and a bucket's CORS rules are read again.")
    negative_ttl: float = setting(5.0, "How long a 404 from the origin is remembered (and a failure to read a "
                                       "bucket's CORS rules).")
    strict: bool = setting(False, "Revalidate on every request (a conditional HEAD; no data refetch).")
    stale_if_error: float = setting(3600.0, "Serve cached metadata this long past its TTL while the origin is down.")
    head_tail: int = setting(
        64 * 1024, "A HEAD of an object not known here asks the origin for its last bytes (a GET with "
                   "`Range: bytes=-head_tail`, at least 64 KiB, or a block where the cache keeps whole blocks "
                   "only) instead of a HEAD: its headers answer the HEAD, its bytes are kept in the block cache "
                   "for the footer read engines send next (Parquet, ORC), and a small object's data read. "
                   "0: an origin HEAD. A HEAD asking for checksums (x-amz-checksum-mode) is an origin HEAD.")

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.ttl < 0 or self.negative_ttl < 0 or self.stale_if_error < 0:
            raise ConfigError("metadata settings must not be negative")
        if not 0 <= self.head_tail <= 64 * 1024**2:
            raise ConfigError(f"metadata.head_tail: between 0 and 64MiB, got {self.head_tail}")


@dataclass(frozen=True, slots=True)
class AdminSettings:
    """The admin API, served under `path` on the S3 port (no bucket name can start with '_')."""

    token: str = setting("", "Bearer token of the admin API; empty: the admin API (health checks included) "
                             "answers nothing.", secret=True)
    path: str = setting("/_gateway", "URL path of the admin API on the S3 port; starts with `/_`.")

    def __post_init__(self) -> None:
        if not self.path.startswith("/_") or self.path.endswith("/"):
            raise ConfigError(f"admin.path: like '/_gateway' (starting with '/_'), got {self.path!r}")


@dataclass(frozen=True, slots=True)
class EventsSettings:
    """S3 event notifications that invalidate at once what changed behind the gateway."""

    sqs_queue_url: str = setting("", "SQS queue receiving the origin bucket's event notifications; "
                                     "empty: no SQS consumer (the admin webhook still works).")
    sqs_region: str = setting("us-east-1", "Region of the SQS queue.")
    sqs_access_key: str = setting("", "Access key for the SQS queue.")
    sqs_secret_key: str = setting("", "Secret key for the SQS queue.", secret=True)
    wait_seconds: int = setting(10, "Long-poll duration of each ReceiveMessage (0 to 20).")

    def __post_init__(self) -> None:
        if self.sqs_queue_url and not re.match(r"^https?://[^/]+/.+", self.sqs_queue_url):
            raise ConfigError(f"events.sqs_queue_url: expected http(s)://host/account/queue, got {self.sqs_queue_url!r}")
        if not 0 <= self.wait_seconds <= 20:
            raise ConfigError("events.wait_seconds: 0 to 20 (SQS long polling)")


@dataclass(frozen=True, slots=True)
class ListingSettings:
    """The listing cache: ListObjects pages keyed by their full parameter set."""

    max_entries: int = setting(10_000, "Most listing pages cached in process.")
    ttl: float = setting(30.0, "How long a cached listing page is served.")

    def __post_init__(self) -> None:
        if self.max_entries < 0 or self.ttl < 0:
            raise ConfigError("listing settings must not be negative")


@dataclass(frozen=True, slots=True)
class RedisSettings:
    """Shared state in Redis: object metadata (L2), listing pages and the invalidation channel.

    An empty `url` means no Redis: the node runs alone with its in-process caches (the
    embedded default). With Redis down the node keeps serving from those caches.
    """

    # Hidden from repr: it may hold a password.
    url: str = setting("", "Where Redis is; empty: no Redis. One server: `redis://[user:password@]host:port/db`, "
                           "`rediss://` (TLS) or `unix:///path/redis.sock`. Sentinel: "
                           "`redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/db]` "
                           "lists the Sentinels (port 26379 if left out); the user and password are the data "
                           "nodes', `?sentinel_password=...` the Sentinels' own if they have one; the gateway "
                           "follows a failover. Cluster: `redis+cluster://[user:password@]host:port[,host:port...]` "
                           "lists seed nodes (port 6379 if left out; the rest are discovered). "
                           "`rediss+sentinel://` and `rediss+cluster://` use TLS. Percent-encode `@ : / , ?` "
                           "in passwords.", secret=True)
    key_prefix: str = setting("gw:", "Every key and the pub/sub channel start with it.")
    socket_timeout: float = setting(0.5, "A Redis call taking longer counts as Redis being down.")
    retry_interval: float = setting(1.0, "After a failure, how long the node runs without Redis before trying again.")
    invalidation_timeout: float = setting(
        1.0, "A write is acknowledged once every node listening on the invalidation channel confirmed it "
             "dropped what the write changed, or after this long; a node trusts its cached metadata and "
             "listings only while the channel answered a PING sent less than this long ago, so a node "
             "that did not confirm in time no longer answers from its caches (it asks the origin) when "
             "the write is acknowledged. Also bounds how long a hung Redis can hide a write.")

    @property
    def target(self) -> RedisTarget:
        """What `url` names (a server, Sentinel or Cluster)."""
        return redis_target(self.url)

    def __post_init__(self) -> None:
        kind = redis_target(self.url).kind if self.url else None
        if kind == "cluster" and ("{" in self.key_prefix or "}" in self.key_prefix):
            raise ConfigError("redis.key_prefix: no braces with redis+cluster:// (a hash tag in the "
                              "prefix would put every key in one slot, on one master)")
        if self.socket_timeout <= 0 or self.retry_interval <= 0 or self.invalidation_timeout <= 0:
            raise ConfigError("redis.socket_timeout, redis.retry_interval and redis.invalidation_timeout must be positive")


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """The fleet: nodes on one Redis that act as one cache holding N times as much.

    On only when `redis.url` and `cluster.secret` are both set. Each block has `replicas`
    owners among the live members (rendezvous hashing); a node asks a block's owners for
    it over the peer API (`/_peer/v1/...` on the S3 port, authenticated with the secret)
    when they hold it, and otherwise fetches it from the origin with the rest of the read
    and offers it to them, so that every block is kept by its owners. A peer that fails
    costs speed: the next owner, then the origin, is asked instead.
    """

    node_id: str = setting("", "This node's name in the fleet, unique per node; empty: the `host:port` of "
                               "`cluster.advertise_url`.")
    advertise_url: str = setting("", "URL the other nodes reach this node's S3 port at, `http://host:port`; "
                                     "empty: `http://<server.host>:<server.port>` (the host name when "
                                     "`server.host` is `0.0.0.0`).")
    secret: str = setting("", "Shared by every node of the fleet; authenticates peer requests (HMAC-SHA256, "
                              "never S3 credentials). Empty: no fleet, the node runs alone.", secret=True)
    heartbeat_interval: float = setting(2.0, "How often a node renews its membership in Redis and reads the "
                                             "live members again.")
    member_ttl: float = setting(6.0, "A node not heard of for this long is no longer a member (a crashed node "
                                     "stops owning blocks after it).")
    peer_connect_timeout: float = setting(2.0, "Timeout for connecting to a peer; past it the next owner, then "
                                               "the origin, is asked.")
    peer_read_timeout: float = setting(10.0, "Timeout for each read from a peer connection.")
    peer_ca_file: str = setting("", "PEM file of the CA certificates that signed the other nodes' TLS "
                                    "certificates, for peers reached over https (the nodes serve TLS: "
                                    "`server.tls_cert_file`); empty: the system's CAs.")
    replicas: int = setting(1, "Owners per block: the nodes that keep it and may fetch it from the origin.")
    passive_cache: bool = setting(False, "A node that is not a block's owner keeps a copy of the blocks it "
                                         "read from peers (more hits here, less room in the fleet).")
    hot_replication: bool = setting(True, "Hot objects get more owners than `replicas`, up to every node, "
                                          "so they are read locally everywhere (the replication controller).")
    heat_interval: float = setting(5.0, "How often each node publishes its access heat and the controller "
                                        "sets the replica counts again.")
    heat_half_life: float = setting(120.0, "Access heat halves after this many seconds without reads: how "
                                           "fast a cooled object loses its extra replicas.")
    hot_threshold: float = setting(200.0, "Heat (reads summed over the fleet, decayed by `heat_half_life`) "
                                          "at which an object is kept on every node; an object with a k-th "
                                          "of it gets 1/k of the nodes (never fewer than `replicas`).")
    max_replicas: int = setting(0, "Most owners a hot object gets; 0: every node.")
    hot_objects: int = setting(1000, "How many of its hottest objects each node reports, and the most "
                                     "objects that get extra replicas.")

    def __post_init__(self) -> None:
        if self.advertise_url and not re.match(r"^https?://[^/]+/?$", self.advertise_url):
            raise ConfigError(f"cluster.advertise_url: expected http(s)://host:port, got {self.advertise_url!r}")
        if self.heartbeat_interval <= 0 or self.peer_connect_timeout <= 0 or self.peer_read_timeout <= 0:
            raise ConfigError("cluster.heartbeat_interval and the peer timeouts must be positive")
        if self.member_ttl <= self.heartbeat_interval:
            raise ConfigError("cluster.member_ttl: longer than cluster.heartbeat_interval (3 beats is usual)")
        if self.replicas < 1:
            raise ConfigError(f"cluster.replicas: at least 1, got {self.replicas}")
        if self.heat_interval <= 0 or self.heat_half_life <= 0 or self.hot_threshold <= 0:
            raise ConfigError("cluster.heat_interval, cluster.heat_half_life and cluster.hot_threshold "
                              "must be positive")
        if self.max_replicas < 0 or self.hot_objects < 1:
            raise ConfigError("cluster.max_replicas: 0 (every node) or more; cluster.hot_objects: at least 1")


@dataclass(frozen=True, slots=True)
class Settings:
    origin: OriginSettings = OriginSettings()
    server: ServerSettings = ServerSettings()
    auth: AuthSettings = AuthSettings()
    cache: CacheSettings = CacheSettings()
    metadata: MetadataSettings = MetadataSettings()
    listing: ListingSettings = ListingSettings()
    redis: RedisSettings = RedisSettings()
    cluster: ClusterSettings = ClusterSettings()
    admin: AdminSettings = AdminSettings()
    events: EventsSettings = EventsSettings()

    @property
    def fleet(self) -> bool:
        """Whether this node is part of a fleet: Redis and a cluster secret are both set."""
        return bool(self.redis.url and self.cluster.secret)

    def redacted(self) -> dict[str, Any]:
        """The effective settings as plain data, secrets replaced by '***'."""
        return _redact(dataclasses.asdict(self))
