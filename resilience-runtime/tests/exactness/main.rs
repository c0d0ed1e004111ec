//! The concurrency matrix: every bound the engine states for a rule, checked exactly
//! under 1, 2, 4, 8, 16 and 64 threads (or tasks).
//!
//! Each case counts what it saw itself: its own in-flight counter, incremented right
//! after admission and decremented before the call finishes, with its maximum, its
//! own count of admitted calls, and its own count of refusals by reason. It then
//! checks the stated bound exactly:
//!
//! * visits ([`visits`]): `max_visits(N)` in a single window admits exactly
//!   `min(N, calls)`, and `N = 0` (the kill switch) admits nothing, ever; also while
//!   another thread keeps swapping the policy between two forms that share the window;
//! * concurrency ([`concurrency`]): `max_concurrency(n)` never has more than `n` calls
//!   in flight (the callers' own count and `peak_concurrency`): plain, while the policy
//!   is swapped, with a delay rule whose probes arrive while the limit is still
//!   full, and with a queue (`queue(16, 20ms)`) whose waiters take freed slots while
//!   the policy is swapped (nobody left waiting afterwards);
//! * concurrency and a half-open classic breaker ([`concurrency`]):
//!   `max_concurrency(2)` with 5 half-open probes, `T` calls racing for them and
//!   holding their permits: at most 2 in flight, exactly `min(2, T)` admitted, every
//!   refusal `Concurrency` or `BreakerOpen`; after those probes succeeded the breaker is
//!   still half-open, and the probes the limit refused gave their slots back: exactly
//!   the `5 - min(2, T)` left are admitted one at a time, and the last closes it;
//! * token bucket ([`tokens`]): on a manual clock, a frozen bucket admits exactly its
//!   capacity, also while another thread keeps swapping the policy between two forms
//!   with the same bucket; a clock advanced by `T` while the calls run admits at most
//!   `capacity + floor(rate * T)`; refill is exact; a new, larger bucket admits the
//!   very next call; through the `#[downgrade]` shapes on the system clock, a bucket
//!   that cannot refill while the case runs (`token_bucket(0.001, 500)`) admits exactly
//!   500, with and without the policy swapped (async: counted inside the body, equal to
//!   the point's passes, futures dropped mid-flight included);
//! * exceptions and timeouts ([`health`]): `max_exceptions(N)` / `timeouts(_, N)` with
//!   `T` threads (or tasks) doing one call at a time record at least `N` and at most
//!   `N - 1 + T`, also while another thread keeps swapping the policy for the same rule
//!   plus a concurrency rule that never trips; for `max_exceptions` also through the
//!   `#[downgrade]` shapes, whose bodies fail on every call (every completed call is an
//!   exception, a future dropped mid-flight is not);
//! * delay ([`delay`]), on a manual clock: at most one probe per retry interval, with
//!   `T` threads asking at the same instant and holding their permits: none 1 ns
//!   before the probe time, exactly one at it (the others `Delay`), none half an
//!   interval and 1 ns short of an interval after a failed probe, exactly one a full
//!   interval after it, whose success ends the delay; and with `max_concurrency(1)`
//!   held by a call admitted before the delay, the probe refused by the full limit is
//!   given back (none admitted, `Concurrency` or `Delay`), and once the slot is free
//!   exactly one of `T` is admitted;
//! * classic breaker ([`breakers`]): half-open admits exactly `half_open_probes` of the
//!   calls racing for the probes, also while another thread keeps swapping the point's
//!   policy;
//! * SRE breaker ([`breakers`]): while dropping, at most one forced probe per
//!   `force_pass_interval` (none before the first pass, exactly one when every thread
//!   asks after a full interval, none half an interval later), also along a timeline
//!   walked by every thread at once across bucket boundaries, where with a roll of 0
//!   nothing else may be admitted and every decision must see the window's failures;
//! * adaptive ([`adaptive`]): a `Gate` never has more than `capacity` permits out
//!   (capacity 1 and 3, and at most 3 while another thread resizes it between 2 and
//!   3); a gradient limit pinned at 3 (`min = max = initial`) never has more than 3
//!   calls in flight through a point;
//! * hot keys ([`keys`]), on a manual clock: a tracked key admits exactly its burst
//!   (overrides exactly theirs, `blocked` none), also while the policy is swapped; an
//!   untracked key (ten times more keys than tracked) never more than its burst; no key
//!   ever has more calls in flight than its `max_concurrency`, tracked or not; and the
//!   same through `key = ...` on a sync and an async `#[downgrade]` fn;
//! * cluster lease (`cluster`, feature `redis`, against the Redis of
//!   `RESILIENCE_REDIS_URL`; fails without one): a visits lease admits at most `quota`
//!   calls per Redis window, and, alone on its key and drained, exactly `quota`.
//!
//! Call shapes: `Point::enter` / `Permit::finish` (and dropped permits) for every
//! point case; a sync `#[downgrade]` fn and an `async fn` with `#[downgrade]` on a
//! multi-thread tokio runtime (some futures dropped mid-flight) for the visits,
//! concurrency, token bucket and exceptions cases; the types themselves for the SRE
//! breaker, the gate and the lease. Every point case also checks the books: every call
//! is one visit, `visits == passes + downgrades`, the refusals the callers saw are the
//! point's downgrades reason by reason, every permit came back (`concurrency == 0`),
//! and the calls the callers saw admitted are the point's passes.
//!
//! Each test runs all its combinations and then fails with every failed check, each
//! naming its case, shape, thread count and swap mode and what was seen.
//!
//! Shared helpers are in [`support`] (the call shapes and [`support::drive`] in
//! `support/shapes.rs`, the races at one instant in `support/race.rs`); a
//! `#[downgrade]` fn stamped out by its macros lives in the module that uses it, and
//! every point name is distinct.

mod support;

mod adaptive;
mod breakers;
#[cfg(feature = "redis")]
mod cluster;
mod concurrency;
mod delay;
mod health;
mod keys;
mod tokens;
mod visits;
