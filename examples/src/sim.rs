//! A deterministic discrete-event simulation of a service driven past its capacity,
//! to compare admission policies ([`SimLimit`]) on the same arrivals.
//!
//! The service has `workers` that each serve one call at a time, in arrival order,
//! from an unbounded queue; a call's service time is `base_latency x (0.5 + 0.5 E)`
//! with `E` exponential of mean 1 (mean `base_latency`, p99 about 2.8x), multiplied by
//! `1 + contention x waiting / workers` where `waiting` is the queue length when the
//! service starts (memory, locks and scheduling get worse as work piles up). Calls
//! arrive as a Poisson process: `warmup_rate` per second during `warmup`, then
//! `arrival_rate` until `duration`. The simulated CPU meter is the share of busy
//! workers over each 250 ms, smoothed with `cpu_beta`.
//!
//! Latency is measured from arrival to completion, so queueing counts. Calls still
//! queued or running at the end are counted in the percentiles with their age then (a
//! lower bound), so an exploding queue cannot hide behind survivor bias. Goodput is
//! the number of calls completed within the `sla` after the warm-up, per second.
//!
//! The run is a function of the [`Scenario`] (including its `seed`) alone: the same
//! inputs give the same [`SimReport`].

use resilience_runtime::adaptive::{
    AdaptiveConfig, AdaptiveLimiter, FixedCpu, Gate, GatePermit, GradientConfig, GradientLimiter,
    LatencyPermit,
};
use resilience_runtime::{Clock, FieldError, Instant, ManualClock};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// The simulated service and its load.
///
/// # Examples
///
/// ```
/// use examples::sim::Scenario;
///
/// let s = Scenario::default();
/// assert_eq!(s.capacity(), 2000.0); // 40 workers / 20 ms
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scenario {
    /// Calls served at once (>= 1).
    pub workers: u64,
    /// Mean service time without contention (> 0).
    pub base_latency: Duration,
    /// Service-time slowdown per queued call per worker (>= 0).
    pub contention: f64,
    /// Arrivals per second during the warm-up (>= 0).
    pub warmup_rate: f64,
    /// How long the warm-up lasts.
    pub warmup: Duration,
    /// Arrivals per second after the warm-up (> 0).
    pub arrival_rate: f64,
    /// Total simulated time (> `warmup`).
    pub duration: Duration,
    /// Latency within which a completed call counts as goodput.
    pub sla: Duration,
    /// Weight of the previous reading in the CPU meter, per 250 ms (`0 ..< 1`):
    /// go-zero's 0.95 by default, 0 for a meter of the last 250 ms alone.
    pub cpu_beta: f64,
    /// Seed of the random arrivals and service times.
    pub seed: u64,
    /// The share of arrivals that are [`Priority::Critical`](resilience_runtime::priority::Priority::Critical)
    /// (`0 ..= 1`; the others are `Default`); 0.
    pub critical_share: f64,
}

impl Default for Scenario {
    /// 40 workers of 20 ms (2000 calls/s), warmed up for 5 s at 70% of capacity, then
    /// 25 s at 2.5x capacity; SLA 200 ms; go-zero's CPU smoothing.
    fn default() -> Self {
        Scenario {
            workers: 40,
            base_latency: Duration::from_millis(20),
            contention: 0.05,
            warmup_rate: 1400.0,
            warmup: Duration::from_secs(5),
            arrival_rate: 5000.0,
            duration: Duration::from_secs(30),
            sla: Duration::from_millis(200),
            cpu_beta: 0.95,
            seed: 0x5eed,
            critical_share: 0.0,
        }
    }
}

impl Scenario {
    /// The most calls per second the service completes: `workers / base_latency`.
    pub fn capacity(&self) -> f64 {
        self.workers as f64 / self.base_latency.as_secs_f64()
    }

    fn validate(&self) -> Result<(), SimError> {
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if self.workers == 0 {
            return Err(SimError::new("workers", "must be at least 1"));
        }
        if self.base_latency.is_zero() {
            return Err(SimError::new("base_latency", "must be non-zero"));
        }
        if !(self.contention.is_finite() && self.contention >= 0.0) {
            return Err(SimError::new("contention", "must be a finite number >= 0"));
        }
        if !(self.warmup_rate.is_finite() && self.warmup_rate >= 0.0) {
            return Err(SimError::new("warmup_rate", "must be a finite number >= 0"));
        }
        if !positive(self.arrival_rate) {
            return Err(SimError::new(
                "arrival_rate",
                "must be a positive finite number",
            ));
        }
        if self.duration <= self.warmup {
            return Err(SimError::new("duration", "must be longer than `warmup`"));
        }
        if !(0.0..1.0).contains(&self.cpu_beta) {
            return Err(SimError::new("cpu_beta", "must be in 0..1"));
        }
        if !(0.0..=1.0).contains(&self.critical_share) {
            return Err(SimError::new("critical_share", "must be in 0..=1"));
        }
        Ok(())
    }
}

/// How calls are admitted into the service.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SimLimit {
    /// Every call is admitted.
    Unlimited,
    /// A [`Gate`] of this capacity.
    Fixed(u64),
    /// An [`AdaptiveLimiter`] reading the simulated CPU meter.
    Shedder(AdaptiveConfig),
    /// A [`GradientLimiter`].
    Gradient(GradientConfig),
}

/// The result of one run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SimReport {
    /// Calls that arrived.
    pub offered: u64,
    /// Calls admitted.
    pub admitted: u64,
    /// Calls refused by the admission policy.
    pub refused: u64,
    /// Admitted calls that completed before the end.
    pub completed: u64,
    /// Calls completed within the SLA after the warm-up, per second.
    pub goodput: f64,
    /// Median latency of admitted calls (unfinished ones at their age at the end).
    pub p50: Duration,
    /// 99th percentile latency of admitted calls, the same way.
    pub p99: Duration,
    /// The most calls in flight (queued or served) at once.
    pub max_in_flight: u64,
    /// The critical calls (see [`Scenario::critical_share`]).
    pub critical: TierOutcome,
    /// The other calls.
    pub other: TierOutcome,
}

/// What one tier of calls got in a run (after the warm-up).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TierOutcome {
    /// Calls of the tier that arrived after the warm-up.
    pub offered: u64,
    /// Of those, calls completed within the SLA.
    pub good: u64,
    /// 99th percentile latency of the tier's admitted calls after the warm-up.
    pub p99: Duration,
}

impl TierOutcome {
    /// `good / offered`: the share of the tier's calls served within the SLA.
    pub fn goodput_share(&self) -> f64 {
        if self.offered == 0 {
            1.0
        } else {
            self.good as f64 / self.offered as f64
        }
    }
}

enum Ticket<'a> {
    None,
    Gate(#[allow(dead_code)] GatePermit<&'a Gate>),
    Shedder(LatencyPermit<&'a AdaptiveLimiter>),
    Gradient(LatencyPermit<&'a GradientLimiter>),
}

struct Call<'a> {
    arrival: u64,
    critical: bool,
    ticket: Ticket<'a>,
}

/// SplitMix64: small, fast, and good enough for arrival times.
struct Rng(u64);

impl Rng {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        // 53 random bits in (0, 1].
        ((z >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    fn exp(&mut self) -> f64 {
        -self.next_f64().ln()
    }
}

/// Simulates `scenario` under `admission`.
///
/// # Errors
///
/// A [`SimError`] naming an invalid field of the scenario or of the admission
/// policy's configuration.
///
/// # Examples
///
/// ```
/// use examples::sim::{run, SimLimit, Scenario};
/// use std::time::Duration;
///
/// let s = Scenario { warmup: Duration::from_secs(1), duration: Duration::from_secs(3), ..Scenario::default() };
/// let fixed = run(&s, &SimLimit::Fixed(40))?;
/// assert!(fixed.refused > 0);
/// assert!(fixed.p99 < 4 * s.base_latency);
/// assert_eq!(run(&s, &SimLimit::Fixed(40))?, fixed, "deterministic");
/// # Ok::<(), examples::sim::SimError>(())
/// ```
pub fn run(scenario: &Scenario, admission: &SimLimit) -> Result<SimReport, SimError> {
    scenario.validate()?;
    let s = scenario;
    let clock = ManualClock::new();
    let t0 = clock.now().as_nanos();
    let cpu = Arc::new(FixedCpu::new(0));
    let gate = match admission {
        SimLimit::Fixed(l) => Some(Gate::with_clock(*l, Clock::manual(&clock))?),
        _ => None,
    };
    let shedder = match admission {
        SimLimit::Shedder(c) => Some(AdaptiveLimiter::with_parts(
            *c,
            cpu.clone(),
            Clock::manual(&clock),
        )?),
        _ => None,
    };
    let gradient = match admission {
        SimLimit::Gradient(c) => Some(GradientLimiter::with_clock(*c, Clock::manual(&clock))?),
        _ => None,
    };

    // Separate streams, so that every policy meets the same arrivals.
    let mut rng = Rng(s.seed);
    let mut service_rng = Rng(s.seed ^ 0x6a09_e667_f3bc_c909);
    let mut tier_rng = Rng(s.seed ^ 0x3c6e_f372_fe94_f82b);
    // Per tier (critical, other): offered after the warm-up, good, latencies.
    let mut tiers: [(u64, u64, Vec<u64>); 2] = Default::default();
    let base_ns = nanos(s.base_latency) as f64;
    let warmup_end = t0 + nanos(s.warmup);
    let end = t0 + nanos(s.duration);
    let sla = nanos(s.sla);
    let workers = s.workers;

    let mut calls: Vec<Option<Call<'_>>> = Vec::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    let mut running: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    let mut latencies: Vec<u64> = Vec::new();
    let (mut offered, mut admitted, mut refused, mut completed, mut good) = (0u64, 0, 0, 0, 0);
    let mut max_in_flight = 0u64;

    // CPU meter: busy-worker time integrated over 250 ms periods.
    const METER_NS: u64 = 250_000_000;
    let mut meter_next = t0 + METER_NS;
    let mut busy_ns_acc = 0u128;
    let mut last_event = t0;
    let mut cpu_avg = 0.0f64;

    let arrival_gap = |rng: &mut Rng, t: u64| -> Option<u64> {
        let rate = if t < warmup_end {
            s.warmup_rate
        } else {
            s.arrival_rate
        };
        (rate > 0.0).then(|| (rng.exp() / rate * 1e9) as u64 + 1)
    };
    let mut next_arrival = match arrival_gap(&mut rng, t0) {
        Some(g) => t0 + g,
        None => warmup_end,
    };

    loop {
        let next_done = running.peek().map(|Reverse((t, _))| *t);
        let arrival_first = next_done.is_none_or(|d| next_arrival < d);
        let t = if arrival_first {
            next_arrival
        } else {
            next_done.unwrap_or(u64::MAX)
        };
        if t >= end {
            break;
        }
        // Advance the CPU meter to `t`.
        let busy = running.len() as u128;
        let mut from = last_event;
        while meter_next <= t {
            busy_ns_acc += busy * u128::from(meter_next - from);
            let usage = busy_ns_acc as f64 / (METER_NS as f64 * workers as f64);
            cpu_avg = cpu_avg * s.cpu_beta + usage * 1000.0 * (1.0 - s.cpu_beta);
            cpu.set(cpu_avg.round() as u64);
            busy_ns_acc = 0;
            from = meter_next;
            meter_next += METER_NS;
        }
        busy_ns_acc += busy * u128::from(t - from);
        last_event = t;
        clock.set(Instant::from_nanos(t));

        if arrival_first {
            offered += 1;
            let critical = tier_rng.next_f64() <= s.critical_share;
            let priority = if critical {
                resilience_runtime::priority::Priority::Critical
            } else {
                resilience_runtime::priority::Priority::Default
            };
            if t >= warmup_end {
                tiers[usize::from(!critical)].0 += 1;
            }
            next_arrival = match arrival_gap(&mut rng, t) {
                Some(g) => t + g,
                None => warmup_end.max(t + 1),
            };
            let ticket = match admission {
                SimLimit::Unlimited => Ok(Ticket::None),
                SimLimit::Fixed(_) => gate.as_ref().map_or(Ok(Ticket::None), |g| {
                    g.try_acquire().map(Ticket::Gate).map_err(|_| ())
                }),
                SimLimit::Shedder(_) => shedder.as_ref().map_or(Ok(Ticket::None), |l| {
                    l.try_acquire(Instant::from_nanos(t))
                        .map(Ticket::Shedder)
                        .map_err(|_| ())
                }),
                SimLimit::Gradient(_) => gradient.as_ref().map_or(Ok(Ticket::None), |l| {
                    l.try_acquire_for(Instant::from_nanos(t), || priority)
                        .map(Ticket::Gradient)
                        .map_err(|_| ())
                }),
            };
            let Ok(ticket) = ticket else {
                refused += 1;
                continue;
            };
            admitted += 1;
            calls.push(Some(Call {
                arrival: t,
                critical,
                ticket,
            }));
            queue.push_back(calls.len() - 1);
        } else if let Some(Reverse((_, id))) = running.pop() {
            let call = calls[id].take().expect("a running call is stored");
            let latency = t - call.arrival;
            latencies.push(latency);
            completed += 1;
            if t >= warmup_end && latency <= sla {
                good += 1;
            }
            if call.arrival >= warmup_end {
                let tier = &mut tiers[usize::from(!call.critical)];
                tier.2.push(latency);
                if latency <= sla {
                    tier.1 += 1;
                }
            }
            match call.ticket {
                Ticket::Shedder(p) => p.pass(Instant::from_nanos(t)),
                Ticket::Gradient(p) => p.pass(Instant::from_nanos(t)),
                Ticket::Gate(_) | Ticket::None => {}
            }
        }
        // Start queued calls on free workers.
        while (running.len() as u64) < workers {
            let Some(id) = queue.pop_front() else { break };
            let waiting = queue.len() as f64;
            let slowdown = 1.0 + s.contention * waiting / workers as f64;
            let service = base_ns * (0.5 + 0.5 * service_rng.exp()) * slowdown;
            running.push(Reverse((t + service as u64 + 1, id)));
        }
        max_in_flight = max_in_flight.max(queue.len() as u64 + running.len() as u64);
    }
    // Unfinished calls count with their age at the end.
    for call in calls.iter().flatten() {
        latencies.push(end - call.arrival);
        if call.arrival >= warmup_end {
            tiers[usize::from(!call.critical)]
                .2
                .push(end - call.arrival);
        }
    }
    let tier = |(offered, good, mut l): (u64, u64, Vec<u64>)| {
        l.sort_unstable();
        let p99 = if l.is_empty() {
            Duration::ZERO
        } else {
            let i = ((l.len() as f64 * 0.99).ceil() as usize).clamp(1, l.len()) - 1;
            Duration::from_nanos(l[i])
        };
        TierOutcome { offered, good, p99 }
    };
    let [critical, other] = tiers.map(tier);
    latencies.sort_unstable();
    let pct = |q: f64| -> Duration {
        if latencies.is_empty() {
            return Duration::ZERO;
        }
        let i = ((latencies.len() as f64 * q).ceil() as usize).clamp(1, latencies.len()) - 1;
        Duration::from_nanos(latencies[i])
    };
    Ok(SimReport {
        offered,
        admitted,
        refused,
        completed,
        goodput: good as f64 / (s.duration - s.warmup).as_secs_f64(),
        p50: pct(0.50),
        p99: pct(0.99),
        max_in_flight,
        critical,
        other,
    })
}

/// An invalid field of a [`Scenario`] or of the admission it is run with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimError {
    /// The field's name, such as `workers` or `capacity`.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl SimError {
    fn new(field: &'static str, message: impl Into<String>) -> SimError {
        SimError {
            field,
            message: message.into(),
        }
    }
}

impl From<FieldError> for SimError {
    fn from(e: FieldError) -> SimError {
        SimError {
            field: e.field,
            message: e.message,
        }
    }
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid scenario: `{}` {}", self.field, self.message)
    }
}

impl std::error::Error for SimError {}

/// Nanoseconds of `d`, saturating.
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
