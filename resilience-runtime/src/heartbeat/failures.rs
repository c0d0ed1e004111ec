//! When the heartbeat client says that its uploads or pulls fail: the first failure at
//! once, then at most once a minute (with how many were not logged), and the recovery.
//! The decision is pure, on a millisecond timeline the caller passes.

/// How often a run of failures is logged after the first.
pub(crate) const REPEAT_MS: u64 = 60_000;

/// What to log about one upload or pull.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Say {
    /// Nothing (a failure logged less than a minute ago, or a success after successes).
    Nothing,
    /// The first failure after a success (or the start).
    Failing,
    /// A failure a minute or more after the last one logged; `unlogged` failures came
    /// in between.
    StillFailing { unlogged: u64 },
    /// A success after `failures` failures.
    Recovered { failures: u64 },
}

/// The failure log of one kind of request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FailureLog {
    /// Failures since the last success.
    failures: u64,
    /// Failures since the last one logged.
    unlogged: u64,
    /// When a failure was last logged.
    logged_at: u64,
}

impl FailureLog {
    /// A request failed at `now_ms`.
    pub(crate) fn failed(&mut self, now_ms: u64) -> Say {
        self.failures += 1;
        if self.failures == 1 {
            self.logged_at = now_ms;
            self.unlogged = 0;
            return Say::Failing;
        }
        if now_ms.saturating_sub(self.logged_at) >= REPEAT_MS {
            let unlogged = self.unlogged;
            self.logged_at = now_ms;
            self.unlogged = 0;
            return Say::StillFailing { unlogged };
        }
        self.unlogged += 1;
        Say::Nothing
    }

    /// A request succeeded.
    pub(crate) fn succeeded(&mut self) -> Say {
        let failures = std::mem::take(self).failures;
        if failures == 0 {
            Say::Nothing
        } else {
            Say::Recovered { failures }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_then_one_a_minute_then_the_recovery() {
        let mut log = FailureLog::default();
        assert_eq!(log.succeeded(), Say::Nothing);
        assert_eq!(log.failed(1_000), Say::Failing);
        for t in [2_000, 10_000, 60_999] {
            assert_eq!(log.failed(t), Say::Nothing, "at {t}");
        }
        assert_eq!(log.failed(61_000), Say::StillFailing { unlogged: 3 });
        assert_eq!(log.failed(62_000), Say::Nothing);
        assert_eq!(log.failed(121_000), Say::StillFailing { unlogged: 1 });
        assert_eq!(log.succeeded(), Say::Recovered { failures: 7 });
        assert_eq!(log.succeeded(), Say::Nothing);
        assert_eq!(log.failed(130_000), Say::Failing, "a new run starts over");
    }
}
