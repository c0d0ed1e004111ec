//! The guide: how to protect a service with this crate, one concern a chapter, every
//! example a tested program.
//!
//! This module holds no code. Its chapters explain what the attributes and the
//! registry do, in the order you are likely to need them; the items' own pages
//! ([`Policy`](crate::Policy), [`Registry`](crate::Registry), the modules) are the
//! reference. Every example in the chapters is a program compiled and run as a doc
//! test, with every feature on (as docs.rs builds them); the text says which feature
//! a section needs.
//!
//! # Chapters
//!
//! Start here:
//!
//! 1. [Getting started](getting_started): the dependency line, the features, a first
//!    guarded function.
//! 2. [Fallbacks](fallbacks): protecting a function with `#[downgrade]`, its
//!    arguments, and the same guard by hand.
//!
//! Limits and rules:
//!
//! 3. [Rate limiting](rate_limits): visits in a sliding window, token buckets,
//!    warm-up, pacing and waiting for a token.
//! 4. [Concurrency limits and bulkheads](concurrency_limits): calls in flight, a
//!    queue to wait for a slot, priorities under overload.
//! 5. [Circuit breakers](circuit_breakers): `#[breaker]`, the SRE and classic
//!    breakers, and the health rules (exceptions, exception rate, slow calls) with
//!    their delay.
//! 6. [Retries](retries): `#[retry]`, backoff, retry budgets, retry settings at
//!    runtime, hedging.
//! 7. [Timeouts](timeouts): `timeout = "..."` that cancels, the policy's
//!    `call_timeout`, hung calls and cancelled calls.
//! 8. [Axum and tower](axum_and_tower): middleware for a point and every rule of
//!    its policy, retries and hedging, gRPC statuses, adaptive concurrency limits,
//!    priorities from a header.
//! 9. [Limits per user or tenant](per_key_limits): hot keys.
//! 10. [A real overload, measured](overload): an axum service over loopback HTTP at
//!     1x, 2x and 4x its capacity, with no protection, tower's limit, a bulkhead with
//!     a queue and the gradient limit with priorities.
//!
//! Operating it:
//!
//! 11. [Policies at runtime](runtime_policies): where settings come from and which
//!     wins, dry runs, numeric types, points named from data.
//! 12. [Policy files with hot reload](policy_files): TOML or JSON, checked whole,
//!     reloaded on change.
//! 13. [Metrics, logs and traces](observability): Prometheus, the `metrics` facade,
//!     OpenTelemetry, `tracing`.
//! 14. [Statistics and listeners](statistics): counts, windows, per-second series,
//!     call durations, events.
//! 15. [A fleet with the console](fleet): the heartbeat, the admin console, https
//!     and tokens, breakers that know their peers, cluster-wide limits on Redis.
//! 16. [Testing your own code](testing): a registry per test, forced breaker states
//!     and refusals, one clock for every rule.
//!
//! And underneath:
//!
//! 17. [How it works](how_it_works): exactness under concurrency, time and cost,
//!     where it differs from SDS, bloom filters, the timing wheel.

// Doc-only modules: each chapter is the Markdown file of its name. A chapter links
// to items of the features it describes, which a build without one of them cannot
// resolve: the link check is relaxed there only, for that chapter. With every feature
// (docs.rs, the doc check) every link is checked.

// The features table is shared with the crate's front page.
#[doc = include_str!("getting_started.md")]
#[doc = include_str!("features.md")]
pub mod getting_started {}

#[doc = include_str!("fallbacks.md")]
#[cfg_attr(not(feature = "macros"), allow(rustdoc::broken_intra_doc_links))]
pub mod fallbacks {}

#[doc = include_str!("rate_limits.md")]
pub mod rate_limits {}

#[doc = include_str!("concurrency_limits.md")]
#[cfg_attr(not(feature = "tower"), allow(rustdoc::broken_intra_doc_links))]
pub mod concurrency_limits {}

#[doc = include_str!("circuit_breakers.md")]
#[cfg_attr(
    not(all(feature = "config", feature = "tower", feature = "testing")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod circuit_breakers {}

#[doc = include_str!("retries.md")]
#[cfg_attr(
    not(all(feature = "macros", feature = "tokio", feature = "config")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod retries {}

#[doc = include_str!("timeouts.md")]
pub mod timeouts {}

#[doc = include_str!("axum_and_tower.md")]
#[cfg_attr(
    not(all(feature = "tower", feature = "tonic")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod axum_and_tower {}

#[doc = include_str!("overload.md")]
// The chart, made by the example with the table (an inline SVG, so it shows on docs.rs).
#[doc = include_str!("overload.svg")]
#[cfg_attr(not(feature = "tower"), allow(rustdoc::broken_intra_doc_links))]
pub mod overload {}

#[doc = include_str!("per_key_limits.md")]
#[cfg_attr(
    not(all(feature = "config", feature = "tower", feature = "redis")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod per_key_limits {}

#[doc = include_str!("runtime_policies.md")]
#[cfg_attr(
    not(all(feature = "config", feature = "heartbeat")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod runtime_policies {}

#[doc = include_str!("policy_files.md")]
#[cfg_attr(not(feature = "config"), allow(rustdoc::broken_intra_doc_links))]
pub mod policy_files {}

#[doc = include_str!("observability.md")]
#[cfg_attr(
    not(all(
        feature = "prometheus",
        feature = "metrics",
        feature = "opentelemetry",
        feature = "tracing"
    )),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod observability {}

#[doc = include_str!("statistics.md")]
pub mod statistics {}

#[doc = include_str!("fleet.md")]
#[cfg_attr(
    not(all(feature = "config", feature = "redis", feature = "heartbeat-tls")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod fleet {}

#[doc = include_str!("testing.md")]
#[cfg_attr(
    not(all(feature = "tokio", feature = "testing")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod testing {}

#[doc = include_str!("how_it_works.md")]
#[cfg_attr(
    not(all(feature = "config", feature = "redis", feature = "heartbeat")),
    allow(rustdoc::broken_intra_doc_links)
)]
pub mod how_it_works {}
