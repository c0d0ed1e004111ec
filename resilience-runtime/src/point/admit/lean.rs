//! The lean entry (hot): a policy whose rules need neither the flow word nor the
//! window ([`R_FLOW`] clear) pays for its own stages only.
//!
//! Such a policy has a token bucket (with its warm-up and token wait), a cluster-wide
//! limit, an adaptive limit, a breaker and per-key limits, in any mix, and the
//! downgrade percentage and dry run over them. A call asks each stage it has, in that
//! order, then counts its pass in this thread's cell (`tally`), as a call of a point
//! without a policy does: no read-modify-write on a shared word, no ring, no cycle
//! peak. Its window and cycle come from the per-second series, as those of a point
//! without a policy do, and no count of calls in flight is kept (a point's
//! `concurrency` and `peak_concurrency` are those of its concurrency rule).
//!
//! # The guarantees kept here
//!
//! Each stage keeps its own bound (the token bucket's `capacity + rate * t`, the
//! adaptive and cluster limits', the breaker's, the key's), checked by its own
//! atomic protocol. A stage that refuses gives back what the stages before it took
//! (an adaptive flight, a breaker call, a key's slot), through one guard (`taken`).

use crate::keys::Refusal;
use crate::point::admit::attempt::{Entry, KEY_HELD, NO_WAIT, TOKEN_HELD};
use crate::point::admit::permit::{fill, Permit};
use crate::point::admit::taken::Taken;
use crate::point::form::compiled::{
    Compiled, ACTIVE, R_ADAPTIVE, R_BREAKER_TIMED, R_FINE, R_FLOW, R_SHADOW, R_TOKENS, R_WARM,
};
use crate::point::form::keys::KeyArg;
use crate::point::Point;
use crate::Reason;

impl Point {
    /// Enters under `c`, a policy without [`R_FLOW`] (see the module docs). Answers
    /// as [`enter_once`](Self::enter_once) does, the token bucket's and the key's
    /// signals to wait included.
    #[inline(never)]
    pub(in crate::point) fn enter_lean<'p>(
        &'p self,
        c: &'static Compiled,
        slot: &mut Option<Permit<'p>>,
        flags: u8,
        key: Option<&KeyArg<'_>>,
    ) -> Entry {
        debug_assert_eq!(c.rules & (ACTIVE | R_FLOW), ACTIVE);
        let now = self.clock.now_ns();
        if let Some(reason) = c.forced() {
            // A forced refusal (`testing`): before any stage.
            return Entry::refused(self.downgrade(reason, now, false).reason);
        }
        let fine = c.rules & R_FINE != 0;
        let mut taken = Taken::new(self, fine);
        let mut key_hold = None;
        if c.rules & R_TOKENS != 0 && flags & TOKEN_HELD == 0 {
            let stamp = self.stamp(fine, now);
            // A warm-up refusal takes no token, and never waits.
            if c.rules & R_WARM != 0 && !self.warm_passes(c, now) {
                return self.refuse_lean(c, Reason::TokenBucket, None, taken, slot, now);
            }
            if !self.take_token(c, stamp) {
                let wait = (c.token_wait != 0 && flags & NO_WAIT == 0)
                    .then(|| self.reserve_token(c, stamp, fine))
                    .flatten();
                match wait {
                    None => {
                        return self.refuse_lean(c, Reason::TokenBucket, None, taken, slot, now)
                    }
                    Some(0) => {}
                    // The call's token is reserved: it comes back after `ns`
                    // (nothing else is taken before the bucket).
                    Some(ns) => {
                        taken.give_back();
                        return Entry::WaitToken(ns);
                    }
                }
            }
        }
        if let Some(cluster) = c.cluster {
            if !cluster.admits() {
                return self.refuse_lean(c, cluster.reason, None, taken, slot, now);
            }
        }
        if c.rules & R_ADAPTIVE != 0 {
            match self.adaptive_admit(c) {
                Some(call) => taken.adaptive = Some(call),
                None => return self.refuse_lean(c, Reason::Overloaded, None, taken, slot, now),
            }
        }
        if let Some(b) = c.breaker {
            match self.breaker_admit(c.rules, b, now) {
                Some(call) => taken.breaker = Some(call),
                None => {
                    taken.give_back();
                    return Entry::refused(self.downgrade(Reason::BreakerOpen, now, false).reason);
                }
            }
        }
        if let (Some(key), Some(form)) = (key, c.keys) {
            // A dry run never waits, nor a call that may not (its key refuses it at once).
            let may_wait = flags & NO_WAIT == 0 && c.rules & R_SHADOW == 0;
            match form.0.admit(key, now, flags & KEY_HELD != 0, may_wait) {
                Ok(hold) => key_hold = hold,
                Err(Refusal::Wait(ns)) => {
                    // The key's token is reserved: the call comes back after `ns`.
                    // Nothing else is held meanwhile.
                    taken.give_back();
                    return Entry::WaitKey(ns);
                }
                Err(_) => {
                    return self.refuse_lean(c, Reason::HotKey, Some(key), taken, slot, now);
                }
            }
        }
        self.pass_untracked();
        let timed =
            c.rules & R_BREAKER_TIMED != 0 || crate::point::state::durations::measuring_durations();
        let start = if timed { self.stamp(fine, now) } else { 0 };
        if start == 0 && taken.is_empty() && key_hold.is_none() {
            // Nothing to complete but an exception: the slot stays empty.
            let _ = taken.keep();
            return Entry::Admitted;
        }
        let kept = taken.keep();
        let mut permit = Permit::untracked(self);
        permit.start = start;
        permit.meta = permit.meta.with_fine(fine);
        if let Some(a) = kept.adaptive {
            permit.attach_adaptive(c, a);
        }
        if let Some(b) = kept.breaker {
            permit.attach_breaker(c, b);
        }
        if let Some(k) = key_hold {
            permit.attach_key(c, k);
        }
        fill(slot, permit);
        Entry::Admitted
    }

    /// A lean stage refused the call: what earlier stages took goes back (`taken` is
    /// dropped), and the downgrade percentage or a dry run may let it run anyway, as
    /// an untracked pass; else it is downgraded. A key's refusal is never spared.
    #[cold]
    #[inline(never)]
    fn refuse_lean<'p>(
        &'p self,
        c: &Compiled,
        reason: Reason,
        key: Option<&KeyArg<'_>>,
        taken: Taken<'p>,
        slot: &mut Option<Permit<'p>>,
        now: u64,
    ) -> Entry {
        taken.give_back();
        if self.spares(c, reason, key, now) {
            self.pass_untracked();
            if crate::point::state::durations::measuring_durations() {
                self.time_untracked(slot);
            }
            return Entry::Admitted;
        }
        Entry::refused(self.downgrade_keyed(reason, key, now, false).reason)
    }
}
