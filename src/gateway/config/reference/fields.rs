//! What each key of the config file means, its bounds and, where `default.toml` has none,
//! its default: one row per key, kept beside the validation that enforces the bounds (the
//! sections' own files under `src/gateway/config/`). The tests in `tests.rs` hold this table
//! to the schema and to validation.

use super::doc::{Bounds, Doc, Fallback, above, from, key, none, only};
use Bounds::{Any, Int, Refused, Text};
use Fallback::{FromFile, Value};

const MS_DAY: i64 = 86_400_000;
const MI: i64 = 1 << 20;
const NAME: Bounds = Text("1-64 of `A-Z a-z 0-9 _ - .`, unique");
const HEADER: Bounds = Text("a header name");
const FILE: Bounds = Text("a readable file");

/// Sentences that open a section of the reference.
#[rustfmt::skip]
pub const SECTIONS: &[(&str, &str)] = &[
    ("", "Keys written before any table."),
    ("classifier",
        "How a request's entry is decided from its size \
         ([configuration](configuration.md#classification))."),
    ("scrape", "Reading each replica's `/metrics` (queue, running requests, KV-cache use)."),
    ("entries.<entry>",
        "Each entry's connection strategy and listener \
         ([configuration](configuration.md#entries-and-strategies))."),
    ("entries.<entry>.slo",
        "The latency objective the entry's requests are placed and hedged against \
         ([placement](placement.md))."),
    ("entries.<entry>.variants[]",
        "Canary variants of an entry; none: one implicit variant `default` \
         ([canaries](canaries.md))."),
    ("replicas[]",
        "One table per replica ([getting started](getting-started.md#against-your-fleet))."),
    ("pools[]", "Named groups of replicas that canary variants target and models are declared on."),
    ("canary",
        "How variants are assigned and judged ([canaries](canaries.md)). The judge's own \
         settings (`window_seconds`, `slo`, `alpha`, `guard`, `margins`, `min_pairs`) are \
         *fixed at start*; the automation knobs follow reloads."),
    ("canary.slo", "The objectives goodput counts against, in canary reports and capacity at SLO."),
    ("admin",
        "Who may change things through the admin API \
         ([security](security.md#the-admin-listener))."),
    ("tls", "TLS on the inference listeners ([security](security.md#tls-on-the-listeners))."),
    ("auth", "API keys on the inference listeners ([security](security.md#api-keys))."),
    ("upstream_tls", "TLS to `https://` replicas ([security](security.md#tls-to-replicas))."),
    ("discovery.dns", "Replicas from a DNS name ([production](production.md#replica-discovery))."),
    ("discovery.kubernetes",
        "Replicas from Kubernetes EndpointSlices \
         ([production](production.md#replica-discovery))."),
    ("health", "Active checks and passive ejection ([reliability](reliability.md#health))."),
    ("retry", "The retry budget ([reliability](reliability.md#retries-and-the-retry-budget))."),
    ("timeouts",
        "Every wait a slow or silent peer could make endless \
         ([reliability](reliability.md#timeouts))."),
    ("admission",
        "In-flight limits, the wait queue and its fairness \
         ([reliability](reliability.md#overload-admission-and-the-queue))."),
    ("limits",
        "What one client may send, and the store shared between gateways \
         ([tenants](tenants.md#several-gateways-one-budget))."),
    ("prefix",
        "The prefix policies' index and estimate, and session affinity ([prefix and \
         sessions](prefix-and-sessions.md))."),
    ("kv_events",
        "Placing by the blocks each engine holds, from vLLM's KV-cache events ([prefix and \
         sessions](prefix-and-sessions.md#what-the-engines-really-hold-kv-events))."),
    ("kv_events.sources[]",
        "A replica's publisher, for replicas whose `/kv_event_sources` is not reachable."),
    ("capacity", "Capacity at SLO and N-1 headroom ([capacity](capacity.md))."),
    ("models",
        "Which replicas serve which model names ([tenants and \
         models](tenants.md#model-routing))."),
    ("tenants[]", "Named API keys with their limits and queue shares ([tenants](tenants.md))."),
    ("routes",
        "What the public listeners serve beyond the inference routes \
         ([security](security.md#routes))."),
];

/// Every key, in any order (the reference follows the schema's).
#[rustfmt::skip]
pub const DOCS: &[Doc] = &[
    // Top level.
    key("listen", Text("an address like `127.0.0.1:8080`"), FromFile,
        "The smart listener: classifies inference requests into an entry; serves the OpenAI \
         routes, `/v1/models` and `/health`. `--listen` overrides it. *Fixed at start.*"),
    key("admin_listen", Text("an address"), FromFile,
        "The admin listener: `/metrics`, `/health`, the admin API and the status page. Keep it \
         private. `--admin-listen` overrides it. *Fixed at start.*"),
    key("policy",
        Text("`prefix_latency`, `prefix_aware`, `predicted_latency`, `least_queue`, `round_robin`"),
        FromFile,
        "How a replica is picked for each request (a canary variant may name its own). See \
         [placement](placement.md)."),
    key("body_limit_bytes", Int(1, 1 << 32), FromFile,
        "Largest request body, on every path of every listener; larger bodies get 413."),
    key("drain_deadline_ms", Int(1, 3_600_000), FromFile,
        "On SIGTERM or SIGINT, how long open requests and streams may finish before they are \
         ended."),
    key("connect_timeout_ms", Int(1, 600_000), FromFile,
        "Longest wait for a connection to a replica (TLS handshake included); past it the \
         connect failed and may be retried elsewhere."),
    key("header_timeout_ms", Refused, none("-"),
        "Replaced by `timeouts.first_byte_ms`."),
    key("access_log", Any, FromFile,
        "One `laneway::access` log line per request, written when its response ends. Off by \
         default: at thousands of tiny requests a second the line costs more than the proxying."),
    // [classifier]
    key("classifier.short_threshold_tokens", Int(1, 10_000_000), FromFile,
        "Estimated prompt tokens at or below which a request takes the short entry; above, the \
         long one."),
    key("classifier.tokenizer", Refused, none("-"),
        "Exact tokenizer counts are not built in; the field is refused rather than ignored. \
         Remove it to use the estimator."),
    // [scrape]
    key("scrape.interval_ms", Int(1, 3_600_000), FromFile,
        "Period of the scrape of each replica's `/metrics` (waiting and running requests, \
         KV-cache use) that balancing reads."),
    key("scrape.stale_after_intervals", Int(1, 1000), FromFile,
        "Reported figures older than this many scrape intervals are ignored, and the replica is \
         judged by the gateway's own counts."),
    // [entries.<entry>]
    key("entries.<entry>.strategy", Text("`force_close`, `spread`, `keep_alive`"), FromFile,
        "How the entry holds its upstream connections: a fresh one per request, a fixed set per \
         replica used in turn, or a pooled keep-alive client."),
    key("entries.<entry>.listen",
        Text("an address, distinct from the other listeners"), none("none"),
        "A dedicated listener for this entry only: every request on it belongs to the entry. \
         *Fixed at start.*"),
    key("entries.<entry>.spread_connections", Int(1, 1024), Value("8"),
        "Connections per replica under `spread`."),
    key("entries.<entry>.ready_connections", Int(0, 64), Value("0"),
        "Under `force_close`: connections per replica opened ahead of the requests, each still \
         used once (0: none)."),
    key("entries.<entry>.ready_max_idle_ms", Int(1, 60_000), Value("10"),
        "Ready connections are kept while a replica's requests come closer together than this; \
         one unused this long is closed."),
    only(&["debug"], key("entries.<entry>.smart_listener", Any, Value("false"),
        "Serve `/debug/...` and `x-laneway-entry: debug` on the smart listener too (the \
         no-config demo sets it).")),
    only(&["debug"], key("entries.<entry>.max_in_flight_per_replica", Int(1, MI), Value("4"),
        "Debug requests in flight per replica, held until their response ends; more get 429.")),
    // [entries.<entry>.slo]
    key("entries.<entry>.slo.ttft_ms", Int(1, 3_600_000), Value("1000"),
        "Time-to-first-token objective. Placement aims at it; `x-laneway-slo-ttft-ms` may \
         tighten it per request. Debug requests are neither placed nor hedged."),
    key("entries.<entry>.slo.tpot_ms", Int(1, 3_600_000), Value("50"),
        "Time-per-output-token objective; `x-laneway-slo-tpot-ms` may tighten it per request."),
    key("entries.<entry>.slo.hedge_percent", Int(0, 100), Value("30"),
        "A streamed request its replica has not answered after this share of its TTFT objective \
         is sent once more (a hedge, and a rescue when an API process frees); 0: never."),
    // [[entries.<entry>.variants]]
    only(&["short", "long"], key("entries.<entry>.variants[].name",
        Text("1-64 of `A-Z a-z 0-9 _ - .`"), none("required"),
        "The variant's name: in the `variant` label, the `x-laneway-variant` header and the \
         admin API. The first variant is the baseline.")),
    only(&["short", "long"], key("entries.<entry>.variants[].strategy",
        Text("`force_close`, `spread`, `keep_alive`"), none("the entry's `strategy`"),
        "The variant's connection strategy.")),
    only(&["short", "long"], key("entries.<entry>.variants[].policy",
        Text("a policy name, as `policy`"), none("the global `policy`"),
        "The variant's placement policy.")),
    only(&["short", "long"], key("entries.<entry>.variants[].pool",
        Text("the name of a `[[pools]]`"), none("every replica"),
        "The replicas the variant places on.")),
    only(&["short", "long"], key("entries.<entry>.variants[].weight", Int(0, 1_000_000), Value("1"),
        "Share of the entry's traffic; 0 takes the variant out of the split (not every variant \
         at 0). Changed at run time with `PUT /admin/variants/{entry}`.")),
    // [[replicas]]
    key("replicas[].name", Text("no `/` or spaces, unique"), none("required"),
        "The replica's name: in metrics, logs, the admin API, pools and the debug entry's \
         `/debug/{name}/...`."),
    key("replicas[].url", Text("`http://` or `https://` host and port, no path"), none("required"),
        "Where the replica listens. The port defaults to the scheme's (80, 443); `https://` is \
         reached over TLS (`[upstream_tls]`). A host name is looked up once and refreshed in \
         the background."),
    key("replicas[].node", Text("not with `nodes`"), none("the replica's name"),
        "The fault domain: replicas on one node fail together (N-1 headroom, fault units)."),
    key("replicas[].nodes",
        Text("at least one, each non-empty and once; not with `node`"), none("`node`"),
        "Every node of a replica that spans several (a PP2/TP8 or TP16 engine); a failure of any \
         takes it down."),
    key("replicas[].rack", Text("non-empty"), none("none"),
        "The group of nodes that fails as one (a fault unit of its own)."),
    key("replicas[].capacity_rps", above(0.0, None), none("learned from traffic"),
        "Requests per second the replica sustains while meeting `[canary] slo`."),
    key("replicas[].models",
        Text("names of 1-256 bytes"), none("read from the replica's `GET /v1/models`"),
        "The model names the replica serves; declared, its `/v1/models` is not read."),
    // [[pools]]
    key("pools[].name", NAME, none("required"),
        "The pool's name, as variants' `pool` name it."),
    key("pools[].replicas", Text("at least one, each a replica's `name`"), none("required"),
        "The pool's members."),
    key("pools[].models", Text("names of 1-256 bytes"), none("none"),
        "Model names every member serves (added to each member's declared list)."),
    // [canary]
    key("canary.sticky_header", HEADER, none("none: `x-request-id`, then a per-request counter"),
        "The request header whose value keeps one user on one variant."),
    key("canary.window_seconds", Int(1, 86_400), Value("300"),
        "The report's sliding window."),
    key("canary.alpha", above(0.0, Some(0.5)), Value("0.05"),
        "Chance of a false \"worse\" (or \"better\") verdict per variant, however often the \
         report is read."),
    key("canary.guard",
        Text("at least one of the nine metric names, each once"),
        Value("[\"ttft_p50\", \"ttft_p95\", \"tpot_p50\", \"tpot_p95\", \"e2e_p95\", \
               \"error_rate\", \"goodput_share\"]"),
        "The metrics that decide a verdict: `ttft_p50`, `ttft_p95`, `ttft_p99`, `tpot_p50`, \
         `tpot_p95`, `tpot_p99`, `e2e_p95`, `error_rate`, `goodput_share`."),
    key("canary.margins",
        Text("keys: metric names; values `0 <= x < 1`"),
        none("latency metrics 0.10 (a ratio), `error_rate` 0.01, `goodput_share` 0.05 (points)"),
        "How much worse a metric may be before it counts as worse, per metric: `margins = { \
         ttft_p99 = 0.25 }`."),
    key("canary.min_pairs", Int(1, 1_000_000), Value("30"),
        "Pairs of requests a metric needs before any verdict."),
    key("canary.auto_rollback", Any, Value("false"),
        "On a \"worse\" verdict, set the candidate's weight to 0."),
    key("canary.promote_step", Int(0, 1_000_000), Value("0"),
        "On \"no difference\" or \"better\", raise the candidate's weight by this much (0: off)."),
    key("canary.promote_max_weight", Int(1, 1_000_000), Value("100"),
        "Promotion stops at this weight."),
    key("canary.promote_min_pairs", Int(1, 100_000_000), Value("500"),
        "Pairs a promotion step needs at least."),
    // [canary.slo]
    key("canary.slo.ttft_ms", above(0.0, None), none("none"),
        "TTFT a request must meet to count as goodput."),
    key("canary.slo.tpot_ms", above(0.0, None), none("none"),
        "TPOT a request must meet to count as goodput."),
    key("canary.slo.e2e_ms", above(0.0, None), none("none"),
        "End-to-end latency a request must meet to count as goodput."),
    // [admin]
    key("admin.token",
        Text("at least 8 characters; not with `token_env`"), none("none: admin writes disabled"),
        "The bearer token admin writes need (and remote reads). Compared in constant time."),
    key("admin.token_env", Text("a variable that is set; not with `token`"), none("none"),
        "The environment variable holding the token, read once at start."),
    // [tls]
    key("tls.cert", FILE, none("required in `[tls]`"),
        "PEM certificate chain, leaf first, served on every inference listener. Read at \
         validation and again on SIGHUP."),
    key("tls.key", FILE, none("required in `[tls]`"),
        "PEM private key (PKCS#8, PKCS#1 or SEC1) of `cert`."),
    // [auth]
    key("auth.keys", Text("non-empty keys"), none("none"),
        "API keys accepted as `Authorization: Bearer <key>` on the inference listeners. Kept \
         only as SHA-256 hashes."),
    key("auth.keys_file", FILE, none("none"),
        "A file of keys, one per line (blank lines and `#` comments skipped), added to `keys`."),
    key("auth.count_by_key", Any, Value("false"),
        "Count accepted requests per key in `laneway_requests_by_key_total{key}` (the label is a \
         hash prefix, never the key)."),
    key("auth.debug_keys", Text("non-empty keys"), none("none"),
        "Keys that may also use the debug entry (the admin token may too)."),
    // [upstream_tls]
    key("upstream_tls.ca", FILE, none("the system's trust store"),
        "PEM bundle the replicas' certificates must chain to. Read again on reload."),
    key("upstream_tls.client_cert", Text("a readable file; with `client_key`"), none("none"),
        "PEM certificate chain presented to replicas that ask for one (mutual TLS)."),
    key("upstream_tls.client_key", Text("a readable file; with `client_cert`"), none("none"),
        "PEM private key of `client_cert`."),
    // [discovery.dns]
    key("discovery.dns.name", Text("non-empty"), none("required in `[discovery.dns]`"),
        "The DNS name whose addresses are the replicas (a headless Service: one record per ready \
         pod). Each is named `ip:port`, its own fault domain."),
    key("discovery.dns.port", Int(1, 65_535), none("required in `[discovery.dns]`"),
        "The replicas' port."),
    key("discovery.dns.interval_ms", Int(100, 3_600_000), Value("5000"),
        "How often the name is resolved; a failed lookup keeps the last good set."),
    key("discovery.dns.https", Any, Value("false"),
        "Reach the addresses over TLS; their certificates must carry the IP as a SAN."),
    // [discovery.kubernetes]
    key("discovery.kubernetes.api",
        Text("an `http(s)://` URL with a host"), Value("\"https://kubernetes.default.svc\""),
        "The Kubernetes API server."),
    key("discovery.kubernetes.namespace",
        Text("non-empty"), none("required in `[discovery.kubernetes]`"),
        "The fleet's namespace."),
    key("discovery.kubernetes.label_selector",
        Text("non-empty"), none("required in `[discovery.kubernetes]`"),
        "The EndpointSlices to read (`app=vllm`); their ready endpoints are the replicas, named \
         after their pods."),
    key("discovery.kubernetes.port_name", Any, none("the slice's first port"),
        "The EndpointSlice port to use, by name."),
    key("discovery.kubernetes.token_file", Any, none("the pod's service-account token, if mounted"),
        "Bearer token file for the API server, read again on each poll."),
    key("discovery.kubernetes.ca_file", Any, none("the service-account CA, if mounted"),
        "CA bundle for an `https` API server."),
    key("discovery.kubernetes.interval_ms", Int(100, 3_600_000), Value("5000"),
        "How often the EndpointSlices are listed; a failed call keeps the last good set."),
    key("discovery.kubernetes.replica_https", Any, Value("false"),
        "Reach the pods over TLS (not the API server's scheme, which `api` gives); their \
         certificates must carry the pod IP."),
    // [health]
    key("health.interval_ms", Int(1, MS_DAY), FromFile,
        "Period of the active `GET /health` check of every replica."),
    key("health.timeout_ms", Int(1, MS_DAY), FromFile,
        "One check's deadline; no answer within it is a failed check."),
    key("health.unhealthy_threshold", Int(1, 100), FromFile,
        "Failed checks in a row that take a replica out of rotation."),
    key("health.healthy_threshold", Int(1, 100), FromFile,
        "Passed checks in a row that bring it back."),
    key("health.consecutive_failures", Int(1, 1000), FromFile,
        "Failures observed on requests in a row (connect errors, resets, 5xx, timeouts; never \
         4xx or 429) that eject a replica."),
    key("health.base_ejection_ms", Int(1, MS_DAY), FromFile,
        "First ejection's length; each repeat doubles it."),
    key("health.max_ejection_ms", Text("1..=86400000, not below `base_ejection_ms`"), FromFile,
        "Longest ejection."),
    key("health.max_ejected_percent", Int(0, 100), FromFile,
        "Share of the replicas ejected at most at once."),
    // [retry]
    key("retry.budget_percent", Int(0, 100), FromFile,
        "Retries (and hedges) may add this share of the requests ..."),
    key("retry.min_per_second", Int(0, 100_000), FromFile,
        "... plus this many a second (a bucket holding ten seconds of it)."),
    key("retry.max_attempts", Int(1, 5), FromFile,
        "Attempts per request, the first included. Only a request no replica saw is retried."),
    // [timeouts]
    key("timeouts.client_header_ms", Int(1, MS_DAY), FromFile,
        "A new connection's first request, and any HTTP/1 request head once started, must arrive \
         within this (slowloris)."),
    key("timeouts.client_idle_ms", Int(1, MS_DAY), FromFile,
        "A client connection with no request open is closed after this (HTTP/2: GOAWAY first); \
         announced as `Keep-Alive: timeout=N`."),
    key("timeouts.client_body_ms", Int(1, MS_DAY), FromFile,
        "A request body must arrive whole within this after its head; else 408."),
    key("timeouts.first_byte_ms", Int(1, MS_DAY), FromFile,
        "Request sent to the replica's response headers; else 504, not retried. A non-streamed \
         response's headers come after its whole generation: size it for the longest."),
    key("timeouts.idle_ms", Int(1, MS_DAY), FromFile,
        "Longest gap between two chunks of a response."),
    key("timeouts.total_ms", Int(1, MS_DAY), FromFile,
        "Request received to the end of its response."),
    // [admission]
    key("admission.max_in_flight", Int(1, MI), FromFile,
        "Admitted inference requests at once; bounds the gateway's own memory."),
    key("admission.max_in_flight_per_replica", Int(1, MI), none("none: no limit"),
        "Inference requests at once per replica; also a replica's capacity in \
         `laneway_n_minus_one_headroom`."),
    key("admission.max_unanswered_per_replica", Int(1, MI), FromFile,
        "Streamed requests a replica has been sent and has not answered (its API backlog); more \
         wait at the gateway, never refused."),
    key("admission.queue_size", Int(0, MI), FromFile,
        "Requests that may wait for room; a full queue answers 429 at once (or sheds a waiter \
         that ranks after the newcomer)."),
    key("admission.queue_timeout_ms", Int(1, MS_DAY), FromFile,
        "Longest wait for room, then 429 with `Retry-After` from the drain rate."),
    key("admission.fair_window_ms", Int(1, MS_DAY), FromFile,
        "How long a tenant counts as active after its last request, and the time constant of its \
         recent admissions."),
    key("admission.tenant_burst", Int(0, MI), FromFile,
        "Places past a full replica's `max_in_flight_per_replica` a tenant under its fair share, \
         or a request of a higher band than one present, may take (0: none)."),
    // [limits]
    key("limits.max_header_bytes", Int(8192, 16 << 20), FromFile,
        "Largest HTTP/1 request head (431 past it); HTTP/2 header list. *Fixed at start.*"),
    key("limits.max_headers", Int(1, 10_000), FromFile,
        "Most HTTP/1 request headers (431 past it). *Fixed at start.*"),
    key("limits.h2_max_concurrent_streams", Int(1, MI), FromFile,
        "HTTP/2 streams per connection, advertised in SETTINGS. *Fixed at start.*"),
    key("limits.store",
        Text("`redis://[user:password@]host:port[/db]`"), none("none: each gateway counts alone"),
        "A Redis shared by every gateway pointed at it: tenants' quota counters, and the prefix \
         policies' session and prefix placements."),
    key("limits.store_key_prefix", Text("1-64 of `A-Z a-z 0-9 . _ : -`"), FromFile,
        "Every key in the store starts with this and a colon."),
    key("limits.store_timeout_ms", Int(1, 10_000), FromFile,
        "Longest wait for the store on a request's path; past it the gateway's local counters \
         decide."),
    // [prefix]
    key("prefix.index_bytes", Int(1, 1 << 36), FromFile,
        "Memory of the block index, all replicas together (least recently used entries go beyond \
         it)."),
    key("prefix.block_size", Int(1, 4096), FromFile,
        "Tokens per KV block: the replicas' `--block-size`."),
    key("prefix.session_header", HEADER, FromFile,
        "The header naming a session; OpenAI's `user` field is the fallback."),
    key("prefix.session_load_factor", from(1.0, 100.0), FromFile,
        "A session's home replica takes it while its requests in flight are under this factor \
         times the mean, plus one."),
    key("prefix.prefill_us_per_token", from(0.0, 1e6), FromFile,
        "The configured TTFT estimate's prefill cost per uncached token (`prefix_latency` uses \
         it until each replica is measured)."),
    key("prefix.request_us", from(0.0, 1e8), FromFile,
        "The configured TTFT estimate's cost per request already on a replica."),
    key("prefix.recompute_weight", from(0.0, 100.0), FromFile,
        "While the best-cached copy of a prompt is still being computed, how many times more the \
         prefill a miss would recompute counts (0: TTFT alone)."),
    key("prefix.share_sessions", Any, FromFile,
        "With `limits.store` set, share where each session's turns were placed with the other \
         gateways."),
    key("prefix.share_prefixes", Any, FromFile,
        "With `limits.store` set, share which replica computed which prompt prefixes."),
    key("prefix.hot_copy_hits", Int(0, 1 << 20), FromFile,
        "A prefix hit this many times since its last copy is computed once more, by a one-token \
         request of the gateway's own, on a replica that lacks it and has fewer requests in flight \
         than wait beside the hit, if its cache has room (0: never)."),
    key("prefix.hot_copy_min_tokens", Int(1, 1 << 24), FromFile,
        "Tokens a hit must cover to count toward a copy, and a replica must lack to take one."),
    key("prefix.tokenizers", Text("served model name = a folder holding `tokenizer.json`"),
        none("none: prompts are read by approximate tokens"),
        "Per served model, the folder of its `tokenizer.json`, `tokenizer_config.json` and chat \
         template: its prompts are read as its engine tokenizes them (needed to match the \
         engines' KV events)."),
    // [kv_events]
    key("kv_events.discover", Any, Value("false"),
        "Ask every replica's `GET /kv_event_sources` where it publishes its KV-cache events, \
         and place prefixes by what each engine really holds."),
    key("kv_events.hash_seed", Text("not empty"), none("vLLM's own seed, `vllm-none-hash`"),
        "The replicas' `PYTHONHASHSEED`, if they run with one: the parent of every prompt's \
         first block hash."),
    key("kv_events.approximate_tokens", Any, Value("false"),
        "The engines tokenize as laneway's approximation (`laneway sim`): their events are \
         used for models without a tokenizer in `prefix.tokenizers`, which otherwise the index \
         places."),
    key("kv_events.max_blocks_per_replica", Int(1, 1 << 28), Value("1048576"),
        "Blocks kept per replica; an account that would grow past it is dropped and the \
         replica's cache counts as unknown."),
    key("kv_events.sources[].replica", Text("the name of a `[[replicas]]` entry"),
        none("required"), "The replica this publisher belongs to."),
    key("kv_events.sources[].events", Text("`tcp://host:port` or `ipc://path`"),
        none("required"), "The replica's KV-event publisher (its `--kv-events-config` endpoint)."),
    key("kv_events.sources[].replay", Text("`tcp://host:port` or `ipc://path`"),
        none("none: missed events are not replayed"),
        "The replica's replay socket (`replay_endpoint`), asked for the batches a gap missed."),
    // [capacity]
    key("capacity.margin_percent", from(0.0, 1000.0), FromFile,
        "Demand is raised by this share before N-1 compares it with what survives a fault unit."),
    key("capacity.window_ms", Int(1, 3_600_000), FromFile,
        "One window of capacity learning and demand: arrivals, goodput and queue growth."),
    key("capacity.attainment_percent", from(0.0, 100.0), FromFile,
        "Share of a window's requests meeting the SLO for its rate to count as sustained."),
    // [models]
    key("models.unknown",
        Text("`\"any\"`, `\"reject\"` or a model name of 1-256 bytes"), Value("\"any\""),
        "What a request for a model no replica serves gets: sent to any replica, 404 \
         `model_not_found`, or served as the named model."),
    key("models.discover", Any, Value("true"),
        "Read each replica's `GET /v1/models` (its model and LoRA adapters) unless it declares \
         `models`."),
    key("models.aliases", Text("names of 1-256 bytes"), none("none"),
        "Names clients send and the model they mean: `\"gpt-4o\" = \"deepseek-v4-flash\"`; the \
         body's `model` is rewritten."),
    // [[tenants]]
    key("tenants[].name", Text("1-64 of `A-Z a-z 0-9 . _ -`, unique"), none("required"),
        "The tenant's label on `/metrics` and in logs (never its key)."),
    key("tenants[].keys", Text("at least one; each non-empty and in one tenant"), none("required"),
        "The tenant's API keys; valid keys even without `[auth]`."),
    key("tenants[].requests_per_minute", Int(1, 1_000_000_000_000), none("unlimited"),
        "Requests a minute (a token bucket holding one minute's allowance)."),
    key("tenants[].tokens_per_minute", Int(1, 1_000_000_000_000), none("unlimited"),
        "Prompt plus completion tokens a minute: reserved from the estimate, settled to the \
         response's usage."),
    key("tenants[].max_concurrent", Int(1, 1_000_000_000_000), none("unlimited"),
        "Requests in flight at once."),
    key("tenants[].weight", Int(1, 1000), Value("1"),
        "Share of queue turns against tenants of the same band."),
    key("tenants[].priority", Int(0, 9), Value("4"),
        "Default priority band; higher bands are served first and shed last."),
    key("tenants[].max_priority", Int(0, 9), none("`priority`"),
        "Highest band `x-laneway-priority` may ask for (never below `priority`)."),
    // [routes]
    key("routes.forward",
        Text("absolute plain paths, exact or ending in `/*`; no control endpoint, no `/debug/...`"),
        none("none"),
        "Paths the public listeners forward untouched to a picked replica, beyond the inference \
         routes."),
];
