//! A point's cluster-wide limit as a policy states it, and its validation: data and
//! checks only, so a policy with one can be written, checked and stored without the
//! Redis client (the admin console validates its documents so). Enforcing it is the
//! `redis` feature's: only a runtime built with it accepts such a policy.

use std::time::Duration;

/// Calls leased per round trip to Redis when a cluster limit (or a key's cluster
/// setting) leaves `batch` out: one round trip per ten calls, at most ten calls over
/// the shared limit per instance (see [`ClusterLease`](crate::redis::ClusterLease)).
pub const DEFAULT_BATCH: u64 = 10;

/// The longest `period` of a visits limit, and the longest expiry of its keys: ten
/// years, in milliseconds.
pub(crate) const MAX_PERIOD_MS: u64 = 10 * 365 * 24 * 3600 * 1000;

/// A limit shared by every instance of a service through Redis (enforced with the
/// `redis` feature), checked after the local rules. Calls spend tokens leased from
/// Redis in batches, so the pass path touches only local atomics; see
/// [`ClusterLease`](crate::redis::ClusterLease) for the over-admission bound and the
/// local fallback used while Redis is unreachable. A rejection is
/// [`Reason::ClusterVisits`](crate::Reason::ClusterVisits) or
/// [`Reason::ClusterTokenBucket`](crate::Reason::ClusterTokenBucket).
///
/// Set it with [`PolicyBuilder::cluster`](crate::PolicyBuilder::cluster) (`redis`
/// feature) or a policy file's `cluster` section.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ClusterLimit {
    /// At most `quota` visits per `period` across the cluster.
    Visits {
        /// Redis URL, such as `redis://127.0.0.1:6379/`, or a Redis Cluster's,
        /// such as `redis+cluster://10.0.0.1:6379,10.0.0.2:6379/`.
        url: String,
        /// Redis key of the shared counter.
        key: String,
        /// Window length, from 1 ms to 10 years.
        period: Duration,
        /// Visits per window.
        quota: u64,
        /// Visits leased per Redis round trip.
        batch: u64,
    },
    /// A token bucket of `rate` tokens per second holding `burst`, across the cluster.
    TokenBucket {
        /// Redis URL (one server or a cluster, as for `Visits`).
        url: String,
        /// Redis key prefix of the shared bucket (its keys are `{key}.tokens` and
        /// `{key}.ts`, in one Redis Cluster slot); must not start with `}`.
        key: String,
        /// Tokens per second.
        rate: f64,
        /// Bucket capacity.
        burst: u64,
        /// Tokens leased per Redis round trip, at most `burst`.
        batch: u64,
    },
}

impl ClusterLimit {
    /// The `batch` a policy file means when it leaves the field out:
    /// [`DEFAULT_BATCH`], or `cap` (a token bucket's `burst`: a batch is taken from
    /// the bucket at once) if that is smaller.
    pub(crate) fn default_batch_up_to(cap: u64) -> u64 {
        DEFAULT_BATCH.min(cap).max(1)
    }

    /// The default `batch` for this limit's algorithm and burst.
    #[cfg_attr(not(feature = "config"), allow(dead_code))]
    pub(crate) fn default_batch(&self) -> u64 {
        match self {
            ClusterLimit::Visits { .. } => ClusterLimit::default_batch_up_to(u64::MAX),
            ClusterLimit::TokenBucket { burst, .. } => ClusterLimit::default_batch_up_to(*burst),
        }
    }

    /// Checks every field, reporting each invalid one (named `cluster.*`) to `fail`:
    /// what a lease needs to start.
    pub(crate) fn check(&self, mut fail: impl FnMut(&'static str, String)) {
        let (url, key, batch) = match self {
            ClusterLimit::Visits {
                url,
                key,
                period,
                quota,
                batch,
            } => {
                if let Err(reason) = check_period(*period) {
                    fail("cluster.period", reason);
                }
                if *quota == 0 {
                    fail("cluster.quota", "must be at least 1".into());
                }
                (url, key, batch)
            }
            ClusterLimit::TokenBucket {
                url,
                key,
                rate,
                burst,
                batch,
            } => {
                if !(rate.is_finite() && *rate > 0.0) {
                    fail(
                        "cluster.rate",
                        format!("must be a finite number > 0, got {rate}"),
                    );
                }
                if *burst == 0 {
                    fail("cluster.burst", "must be at least 1".into());
                } else if *batch > *burst {
                    // A batch is taken from the bucket at once.
                    fail(
                        "cluster.batch",
                        format!("must not exceed `burst` ({burst}), got {batch}"),
                    );
                }
                (url, key, batch)
            }
        };
        if let Err(reason) = check_redis_url(url) {
            fail("cluster.url", reason);
        }
        if key.is_empty() {
            fail("cluster.key", "must not be empty".into());
        } else if matches!(self, ClusterLimit::TokenBucket { .. }) {
            if let Err(reason) = check_bucket_name(key) {
                fail("cluster.key", reason);
            }
        }
        if *batch == 0 {
            fail("cluster.batch", "must be at least 1".into());
        }
    }
}

/// Whether `name` can name a token bucket in Redis, whose two keys are `{name}.tokens`
/// and `{name}.ts`: everything but a name starting with `}`. The braces make `name`
/// (up to its first `}`) the keys' hash tag, so Redis Cluster keeps both in one slot
/// and one script may touch them; a leading `}` would leave the tag empty, and the
/// cluster would hash the two whole names to different slots (`CROSSSLOT`).
pub(crate) fn check_bucket_name(name: &str) -> Result<(), String> {
    if name.starts_with('}') {
        return Err(
            "must not start with `}` (the bucket's keys `{name}.tokens` and \
                    `{name}.ts` would fall in different Redis Cluster slots)"
                .into(),
        );
    }
    Ok(())
}

/// A visits period in milliseconds, or why it cannot be one: from 1 ms to ten years
/// (the longest expiry its keys get).
pub(crate) fn check_period(period: Duration) -> Result<u64, String> {
    let ms = period.as_millis();
    if ms == 0 || ms > u128::from(MAX_PERIOD_MS) {
        return Err(format!("must be between 1 ms and 10 years, got {period:?}"));
    }
    // Checked just above.
    Ok(ms as u64)
}

/// A Redis URL taken apart by [`parse_redis_url`]: one server, or the seed nodes of a
/// Redis Cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) enum RedisUrl {
    /// One server (`redis://`, `rediss://`, a Unix socket): the URL as written.
    Node(String),
    /// A Redis Cluster (`redis+cluster://`, `rediss+cluster://`): one `redis://` or
    /// `rediss://` URL per seed node, each with the URL's user, password, query and
    /// fragment. The client learns every other node from the seeds.
    Cluster(Vec<String>),
}

/// What the URL check says of any URL it cannot read.
const EXPECTED: &str =
    "expected `redis://host[:port][/db]` or `redis+cluster://host[:port][,host[:port]...]`";

/// Whether `url` is a Redis URL the client can connect with, and if not why (the
/// URL itself is left out of the message: it may hold a password). See
/// [`parse_redis_url`] for the forms.
pub(crate) fn check_redis_url(url: &str) -> Result<(), String> {
    parse_redis_url(url).map(drop)
}

/// Takes a Redis URL apart, or says why it is not one (without repeating it: it may
/// hold a password). The forms, each checked as the `redis` crate's parser would:
///
/// - one server: `redis://[user][:password@]host[:port][/db][?...]`, the same with
///   `rediss://` (TLS; `redis-tls` feature), or `redis+unix:///path` and
///   `unix:///path` (a Unix socket);
/// - a Redis Cluster (or a Valkey cluster): `redis+cluster://` or
///   `rediss+cluster://` (TLS), then the user and password if any, then one or more
///   seed nodes `host[:port]` separated by commas, then at most database `/0` and a
///   query: `redis+cluster://app:secret@10.0.0.1:6379,10.0.0.2:6379/`. One seed is
///   enough (the client asks it for the others); more keep the limits reachable while
///   a seed is down.
///
/// A `rediss` URL may not turn certificate checks off (`#insecure`): trust a private
/// certificate authority with `SSL_CERT_FILE` instead.
pub(crate) fn parse_redis_url(url: &str) -> Result<RedisUrl, String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("is not a Redis URL: {EXPECTED}"));
    };
    match scheme {
        "redis+unix" | "unix" => {
            let path = rest.split(['?', '#']).next().unwrap_or("");
            if path.is_empty() || !path.starts_with('/') {
                return Err("a Unix socket URL needs an absolute path (`unix:///path`)".into());
            }
            Ok(RedisUrl::Node(url.to_owned()))
        }
        "redis" | "rediss" => {
            check_tls(scheme)?;
            if rest
                .split(['/', '?', '#'])
                .next()
                .unwrap_or("")
                .contains(',')
            {
                return Err(format!(
                    "names several hosts: a Redis Cluster's URL starts with `{scheme}+cluster://`"
                ));
            }
            check_node(scheme, rest)?;
            Ok(RedisUrl::Node(url.to_owned()))
        }
        "redis+cluster" | "rediss+cluster" => {
            let base = &scheme[..scheme.len() - "+cluster".len()];
            check_tls(base)?;
            // `authority[/path][?query][#fragment]`, the authority being
            // `[userinfo@]seed[,seed...]`.
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, tail) = rest.split_at(end);
            let (userinfo, seeds) = match authority.rsplit_once('@') {
                Some((user, seeds)) => (Some(user), seeds),
                None => (None, authority),
            };
            let mut urls = Vec::new();
            for seed in seeds.split(',') {
                if seed.is_empty() {
                    return Err(format!("has an empty seed node: {EXPECTED}"));
                }
                let node = match userinfo {
                    Some(user) => format!("{user}@{seed}{tail}"),
                    None => format!("{seed}{tail}"),
                };
                let db = check_node(base, &node)?;
                if db != 0 {
                    return Err(format!(
                        "names database {db}: a Redis Cluster has only database 0 (`/0`)"
                    ));
                }
                urls.push(format!("{base}://{node}"));
            }
            Ok(RedisUrl::Cluster(urls))
        }
        _ => Err(format!(
            "has the scheme `{scheme}`: expected `redis`, `rediss`, `redis+cluster`, \
             `rediss+cluster`, `redis+unix` or `unix`"
        )),
    }
}

/// Refuses a TLS scheme where the runtime was built with `redis` but without
/// `redis-tls` (the client would refuse it only when connecting). Without `redis`
/// (a policy checked by the admin console) any scheme is taken.
fn check_tls(scheme: &str) -> Result<(), String> {
    if cfg!(all(feature = "redis", not(feature = "redis-tls"))) && scheme == "rediss" {
        return Err(
            "is a TLS URL (`rediss`): it needs the `redis-tls` feature of resilience-runtime"
                .into(),
        );
    }
    Ok(())
}

/// Checks `rest`, what follows `scheme://` in one server's URL
/// (`[user][:password@]host[:port][/db][?...][#...]`), and returns its database.
fn check_node(scheme: &str, rest: &str) -> Result<i64, String> {
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    if scheme == "rediss" && fragment.is_some_and(|f| !f.is_empty()) {
        return Err(
            "has a fragment (`#...`): certificate checks cannot be turned off; trust a \
             private certificate authority with `SSL_CERT_FILE`"
                .into(),
        );
    }
    let rest = rest.split('?').next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, after)) => (h, after.strip_prefix(':')),
            None => return Err("has an unclosed `[` in its host".into()),
        }
    } else {
        match host_port.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err("has no host (`redis://host[:port][/db]`)".into());
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || matches!(c, '/' | '@' | '?' | '#' | ','))
    {
        return Err("has a character a host cannot have".into());
    }
    if matches!(host, "0.0.0.0" | "::") {
        return Err("has a wildcard address for its host, which nothing can connect to".into());
    }
    if let Some(port) = port {
        if port.parse::<u16>().is_err() {
            return Err("has a port that is not a number from 0 to 65535".into());
        }
    }
    let db = path.trim_matches('/');
    if db.is_empty() {
        return Ok(0);
    }
    db.parse::<i64>()
        .map_err(|_| "has a database that is not a number (`/0`)".to_owned())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// One server's URLs, and whether the check takes them.
    const URLS: [(&str, bool); 27] = [
        ("redis://127.0.0.1/", true),
        ("redis://127.0.0.1", true),
        ("redis://127.0.0.1:6379/", true),
        ("redis://127.0.0.1:6379/3", true),
        ("redis://127.0.0.1:6379/3/", true),
        ("redis://localhost:6379/0?protocol=resp3", true),
        ("redis://user:secret@h:6379/", true),
        ("redis://:secret@h/", true),
        ("redis://%40dmin:p%40ss@h/", true),
        ("redis://[::1]:6379/", true),
        ("redis://h.example.com", true),
        ("redis+unix:///tmp/redis.sock", true),
        ("unix:///tmp/redis.sock", true),
        ("http://h/", false),
        ("redis://", false),
        ("redis:///0", false),
        ("redis://h:port/", false),
        ("redis://h:70000/", false),
        ("redis://h/db", false),
        ("redis://[::1/", false),
        ("127.0.0.1:6379", false),
        ("", false),
        ("unix://", false),
        ("redis://h /", false),
        ("redis://0.0.0.0:6379/", false),
        ("redis://h1:7000,h2:7001/", false),
        ("redis+cluster://h:7000", true),
    ];

    /// TLS URLs: taken without the `redis` feature (a policy the console checks) and
    /// with `redis-tls`; refused with `redis` alone, which cannot connect to them.
    const TLS_URLS: [(&str, bool); 5] = [
        ("rediss://h:6380/", true),
        ("rediss://user:pw@h:6380/0", true),
        ("rediss://h:6380/#insecure", false),
        ("rediss+cluster://h:7000,h:7001/", true),
        ("rediss+cluster://h:7000/#insecure", false),
    ];

    /// Cluster URLs, and the seed URLs the client is given for them.
    const CLUSTER_URLS: [(&str, Option<&[&str]>); 12] = [
        ("redis+cluster://h:7000", Some(&["redis://h:7000"])),
        (
            "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,[::1]:7002/",
            Some(&[
                "redis://127.0.0.1:7000/",
                "redis://127.0.0.1:7001/",
                "redis://[::1]:7002/",
            ]),
        ),
        (
            "redis+cluster://app:s3cret@h1,h2:7001/0?protocol=resp3",
            Some(&[
                "redis://app:s3cret@h1/0?protocol=resp3",
                "redis://app:s3cret@h2:7001/0?protocol=resp3",
            ]),
        ),
        // A comma in the password stays in the password.
        (
            "redis+cluster://app:a,b@h1:7000,h2:7001",
            Some(&["redis://app:a,b@h1:7000", "redis://app:a,b@h2:7001"]),
        ),
        ("redis+cluster://", None),
        ("redis+cluster:///0", None),
        ("redis+cluster://h1,,h2", None),
        ("redis+cluster://h1,", None),
        ("redis+cluster://h1:7000/1", None),
        ("redis+cluster://h1:x", None),
        ("redis+cluster://h1:7000,h2:99999", None),
        ("redis+unix+cluster:///tmp/s", None),
    ];

    #[test]
    fn redis_urls_are_checked_without_the_client() {
        for (url, ok) in URLS {
            assert_eq!(
                check_redis_url(url).is_ok(),
                ok,
                "{url}: {:?}",
                check_redis_url(url)
            );
        }
        let tls = cfg!(any(not(feature = "redis"), feature = "redis-tls"));
        for (url, ok) in TLS_URLS {
            let result = check_redis_url(url);
            assert_eq!(result.is_ok(), ok && tls, "{url}: {result:?}");
            if ok && !tls {
                assert!(result.unwrap_err().contains("`redis-tls`"));
            }
        }
    }

    #[test]
    fn a_cluster_url_names_its_seeds_with_its_credentials() {
        for (url, seeds) in CLUSTER_URLS {
            let parsed = parse_redis_url(url);
            match seeds {
                Some(seeds) => assert_eq!(
                    parsed,
                    Ok(RedisUrl::Cluster(
                        seeds.iter().map(|s| s.to_string()).collect()
                    )),
                    "{url}"
                ),
                None => assert!(parsed.is_err(), "{url}: {parsed:?}"),
            }
        }
        assert_eq!(
            parse_redis_url("redis://h/"),
            Ok(RedisUrl::Node("redis://h/".into()))
        );
        // Messages name the form, never the URL (it may hold a password).
        let err = check_redis_url("redis+cluster://u:hunter2@h1:7000/2").unwrap_err();
        assert!(
            err.contains("database 2") && !err.contains("hunter2"),
            "{err}"
        );
        let err = check_redis_url("redis://u:hunter2@h1:7000,h2:7001/").unwrap_err();
        assert!(
            err.contains("redis+cluster://") && !err.contains("hunter2"),
            "{err}"
        );
    }

    #[test]
    fn bucket_names_may_not_leave_their_hash_tag_empty() {
        assert!(check_bucket_name("api").is_ok());
        assert!(check_bucket_name("a}b").is_ok());
        assert!(check_bucket_name("{tenant}:api").is_ok());
        assert!(check_bucket_name("}api").is_err());
    }

    /// The check agrees with the client's own parser on every URL above: one server's
    /// URL as the client reads it, and each seed of a cluster's.
    #[cfg(feature = "redis")]
    #[test]
    fn the_check_agrees_with_the_redis_client() {
        for (url, _) in URLS.iter().chain(&TLS_URLS) {
            if url.contains("+cluster") {
                continue;
            }
            // Stricter on purpose: certificate checks stay on.
            let insecure = url.ends_with("#insecure");
            assert_eq!(
                check_redis_url(url).is_ok(),
                ::redis::Client::open(*url).is_ok() && !insecure,
                "{url}"
            );
        }
        for (url, seeds) in CLUSTER_URLS {
            let Some(seeds) = seeds else { continue };
            assert!(
                ::redis::cluster::ClusterClient::new(seeds.to_vec()).is_ok(),
                "{url}"
            );
        }
    }

    #[test]
    fn periods_run_from_a_millisecond_to_ten_years() {
        assert!(check_period(Duration::ZERO).is_err());
        assert_eq!(check_period(Duration::from_millis(1)), Ok(1));
        assert!(check_period(Duration::from_millis(MAX_PERIOD_MS + 1)).is_err());
    }
}
