//! The cap on exported points: which points get series of their own, and the sum of
//! the others (`point="other", omitted="true"`). Shared by every exporter.

use crate::stats::PointStats;

/// The points exported one by one, and the sum of the others.
pub(super) struct Rows {
    pub(super) shown: Vec<PointStats>,
    /// The omitted points summed (counters and concurrency added, peak the largest,
    /// `in_delay` true if any), and how many they are.
    pub(super) others: Option<(PointStats, usize)>,
}

impl Rows {
    /// Every row with its labels: `point="NAME"`, and `point="other", omitted="true"`
    /// for the sum of the omitted points (a point may be named `other`; its series has
    /// no `omitted` label).
    pub(super) fn each(&self) -> impl Iterator<Item = (&PointStats, &'static str, &str)> + '_ {
        self.shown
            .iter()
            .map(|p| (p, "", p.name))
            .chain(self.others.iter().map(|(p, _)| (p, "true", "other")))
    }
}

/// Keeps the `max` points that matter most: an open (or half-open) breaker or a delay
/// in force first, then the most visits; the rest are summed. One pass over the
/// points, holding at most `2 * max` snapshots at a time.
pub(super) struct Selector {
    max: usize,
    shown: Vec<PointStats>,
    others: Option<(PointStats, usize)>,
}

fn urgent(p: &PointStats) -> bool {
    p.in_delay
        || p.breaker
            .is_some_and(|b| b.state != crate::BreakerState::Closed)
}

/// More important first.
fn rank(a: &PointStats, b: &PointStats) -> std::cmp::Ordering {
    urgent(b)
        .cmp(&urgent(a))
        .then(b.totals.visits.cmp(&a.totals.visits))
        .then(a.name.cmp(b.name))
}

impl Selector {
    pub(super) fn new(max: usize) -> Selector {
        Selector {
            max,
            shown: Vec::new(),
            others: None,
        }
    }

    /// Whether `max` points are held already.
    pub(super) fn is_full(&self) -> bool {
        self.shown.len() >= self.max
    }

    /// Counts a point that was never called as omitted (its counts are all zero).
    pub(super) fn omit_idle(&mut self) {
        self.others_sum().1 += 1;
    }

    fn others_sum(&mut self) -> &mut (PointStats, usize) {
        self.others.get_or_insert_with(|| {
            (
                PointStats {
                    name: "other",
                    totals: crate::Totals::default(),
                    window: None,
                    last_cycle: None,
                    concurrency: 0,
                    peak_concurrency: 0,
                    in_delay: false,
                    dropped_events: 0,
                    shadow_downgrades_by_reason: crate::ReasonCounts::default(),
                    breaker: None,
                    retry: crate::retry::RetryStats::default(),
                    queue: None,
                    hot_keys: Vec::new(),
                    key_table: None,
                },
                0,
            )
        })
    }

    pub(super) fn push(&mut self, p: PointStats) {
        self.shown.push(p);
        if self.shown.len() >= 2 * self.max.max(1) {
            self.compact();
        }
    }

    /// Keeps the `max` most important snapshots and sums the others.
    fn compact(&mut self) {
        if self.shown.len() <= self.max {
            return;
        }
        if self.max > 0 {
            self.shown.select_nth_unstable_by(self.max - 1, rank);
        }
        let omitted = self.shown.split_off(self.max);
        let (sum, n) = self.others_sum();
        *n += omitted.len();
        for p in &omitted {
            add_into(sum, p);
        }
    }

    pub(super) fn finish(mut self) -> Rows {
        self.compact();
        self.shown.sort_by(|a, b| a.name.cmp(b.name));
        Rows {
            shown: self.shown,
            others: self.others,
        }
    }
}

/// Adds a point's counts to a sum of points (peak: the largest; delay: any).
fn add_into(sum: &mut PointStats, p: &PointStats) {
    let (t, o) = (&mut sum.totals, &p.totals);
    t.visits += o.visits;
    t.passes += o.passes;
    t.downgrades += o.downgrades;
    t.exceptions += o.exceptions;
    t.timeouts += o.timeouts;
    t.cancelled += o.cancelled;
    if let Some(q) = &p.queue {
        let s = sum.queue.get_or_insert_with(crate::QueueStats::default);
        s.waiting += q.waiting;
        s.peak_waiting = s.peak_waiting.max(q.peak_waiting);
        s.admitted += q.admitted;
        s.timed_out += q.timed_out;
        s.cancelled += q.cancelled;
        s.refused += q.refused;
        s.full += q.full;
        s.evicted += q.evicted;
        s.wait = s.wait.saturating_add(q.wait);
        s.max_wait = s.max_wait.max(q.max_wait);
    }
    let (r, q) = (&mut sum.retry, &p.retry);
    r.calls += q.calls;
    r.attempts += q.attempts;
    r.retries += q.retries;
    r.exhausted += q.exhausted;
    r.refused_by_budget += q.refused_by_budget;
    r.hedges += q.hedges;
    r.cancelled += q.cancelled;
    for (a, b) in t
        .downgrades_by_reason
        .0
        .iter_mut()
        .zip(o.downgrades_by_reason.0)
    {
        *a += b;
    }
    let shadow = &mut sum.shadow_downgrades_by_reason.0;
    for (a, b) in shadow.iter_mut().zip(p.shadow_downgrades_by_reason.0) {
        *a += b;
    }
    sum.concurrency += p.concurrency;
    sum.peak_concurrency = sum.peak_concurrency.max(p.peak_concurrency);
    sum.in_delay |= p.in_delay;
    sum.dropped_events += p.dropped_events;
}
