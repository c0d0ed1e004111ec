//! The concurrency rule's queue (a bulkhead that waits): when every slot is taken, a
//! call waits for a slot or its deadline, served first in first out or newest first
//! (`QueueOrder`). Under an adaptive limit the same queue holds the calls the limit
//! has no room for.
//!
//! # Protocol
//!
//! A waiter is an entry in the point's list, under one mutex, which is kept in
//! serving order: higher tiers first, and within a tier the oldest first or, newest
//! first, the newest. It asks for a slot by entering the point again (every rule asked
//! again, the slot taken by the same compare-and-swap as any call), always under the
//! list's lock, and only while it is the first waiter or has been woken. A call that
//! frees a slot sees the waiting count (`Flow::release`) and, under the lock, wakes
//! the first waiter not yet woken. Nothing here depends on which waiter is first: a
//! new call that goes in front of the others looks for a slot as it joins.
//! Because retries and wakes are serialised by the lock, and the count is published
//! before a waiter's first look (`Flow::wait_begin`), a freed slot is never missed:
//! either the waiter's look sees it, or the releaser sees the waiter and wakes it after
//! the waiter's look. A waiter that leaves (timed out, cancelled, refused by another
//! rule) after being woken passes the wake on to the next one, so a wake is never
//! lost with its waiter. A policy change, and a manual clock that moves, wake every
//! waiter to look again.
//!
//! Under an adaptive limit the room a waiter needs is the limit's: an ending call
//! gives it back (`AdaptiveCall::end`) before it releases its slot of the flow word
//! (`Permit::complete_slow`), every call under a queue holds such a slot (a queue
//! puts the point on the flow word), and the release is what sees the waiting count.
//! So the argument above covers the limit's room as well: a waiter's look after the
//! release sees the room, and a look before it is followed by the wake. A call that
//! took the room and is then refused by a later rule holds no slot: it makes the same
//! read-modify-write of the word without releasing anything (`Flow::given_back`) and
//! wakes a waiter it sees (loom models `models/flow.rs`, both ways).
//!
//! While calls wait, a new call joins the queue (the entry checks the count) instead
//! of taking a slot: oldest first, it queues behind them and never passes a waiting
//! one; newest first, it goes in front of its tier, and a full queue makes room by
//! refusing its last waiter (the oldest of the lowest tier) when that one's tier is
//! not higher than the new call's.

use crate::error::{Downgraded, Reason};
use crate::point::admit::attempt::{Entry, KEY_HELD, NO_WAIT, TOKEN_HELD, WAITER};
use crate::point::admit::permit::Permit;
use crate::point::form::compiled::{ACTIVE, R_QUEUE};
use crate::point::form::keys::{KeyArg, WaitingKey};
use crate::point::Point;
use crate::priority::Priority;
use crate::stats::QueueStats;
use crate::sync::atomic::AtomicBool;
use crate::sync::Recover;
use crate::sync::{Arc, AtomicU64, Mutex, MutexGuard, Ordering};
use std::collections::VecDeque;
use std::task::Waker;
use std::time::Duration;

/// How a waiter is woken.
#[derive(Debug)]
enum Wake {
    /// A parked thread.
    Thread(std::thread::Thread),
    /// A task, once it has been polled.
    Task(Option<Waker>),
}

#[derive(Debug)]
struct Waiter {
    /// Woken since it last asked for a slot.
    notified: AtomicBool,
    /// Taken out of the queue by a call of a higher tier (it is refused).
    evicted: AtomicBool,
    priority: Priority,
    wake: Mutex<Wake>,
}

impl Waiter {
    fn wake(&self) {
        match &*self.wake.lock().recover() {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(Some(w)) => w.wake_by_ref(),
            Wake::Task(None) => {}
        }
    }
}

const ADMITTED: usize = 0;
const TIMED_OUT: usize = 1;
const CANCELLED: usize = 2;
const REFUSED: usize = 3;
const FULL: usize = 4;
const EVICTED: usize = 5;

/// A point's waiters, made by the first call that waits.
#[derive(Debug, Default)]
pub(in crate::point) struct WaitQueue {
    waiters: Mutex<VecDeque<Arc<Waiter>>>,
    ends: [AtomicU64; 6],
    wait_ns: AtomicU64,
    max_wait_ns: AtomicU64,
    /// The longest wait since the heartbeat client last took it.
    report_max_ns: AtomicU64,
    peak: AtomicU64,
}

impl WaitQueue {
    fn lock(&self) -> MutexGuard<'_, VecDeque<Arc<Waiter>>> {
        self.waiters.lock().recover()
    }

    /// Wakes the first waiter (in serving order) not yet woken, with the list locked.
    fn wake_one_locked(list: &VecDeque<Arc<Waiter>>) {
        if let Some(w) = list
            .iter()
            .find(|w| !w.notified.swap(true, Ordering::AcqRel))
        {
            w.wake();
        }
    }

    fn wake_all(&self) {
        for w in self.lock().iter() {
            w.notified.store(true, Ordering::Release);
            w.wake();
        }
    }

    fn stats(&self, waiting: u64) -> QueueStats {
        let n = |i: usize| self.ends[i].load(Ordering::Relaxed);
        QueueStats {
            waiting,
            peak_waiting: self.peak.load(Ordering::Relaxed),
            admitted: n(ADMITTED),
            timed_out: n(TIMED_OUT),
            cancelled: n(CANCELLED),
            refused: n(REFUSED),
            full: n(FULL),
            evicted: n(EVICTED),
            wait: Duration::from_nanos(self.wait_ns.load(Ordering::Relaxed)),
            max_wait: Duration::from_nanos(self.max_wait_ns.load(Ordering::Relaxed)),
        }
    }
}

fn remove(list: &mut VecDeque<Arc<Waiter>>, waiter: &Arc<Waiter>) {
    if let Some(i) = list.iter().position(|w| Arc::ptr_eq(w, waiter)) {
        list.remove(i);
    }
}

impl Point {
    /// The point's queue, made (with its clock hook) on first use.
    fn wait_queue(&self) -> &WaitQueue {
        self.queue.get_or_init(|| {
            // A manual clock that moves wakes the waiters to look at their deadlines.
            let me = self.me.clone();
            self.clock.after_move(move |_| {
                let point = me.upgrade();
                if let Some(p) = &point {
                    p.wake_all_waiters();
                }
                point.is_some()
            });
            Box::default()
        })
    }

    /// A slot was freed while calls wait: wakes the first one not yet woken.
    #[cold]
    #[inline(never)]
    pub(in crate::point) fn wake_waiter(&self) {
        if let Some(q) = self.queue.get() {
            WaitQueue::wake_one_locked(&q.lock());
        }
    }

    /// Wakes every waiter to ask again (a policy change, a clock move).
    pub(in crate::point) fn wake_all_waiters(&self) {
        if let Some(q) = self.queue.get() {
            q.wake_all();
        }
    }

    /// The longest wait that ended since the previous call (the heartbeat's per-cycle
    /// max), if the point has a queue.
    #[cfg_attr(not(feature = "heartbeat"), allow(dead_code))]
    pub(crate) fn take_queue_max_wait(&self) -> Option<u64> {
        self.queue
            .get()
            .map(|q| q.report_max_ns.swap(0, Ordering::Relaxed))
    }

    /// The queue's counters, if a call ever waited or was refused by a full queue.
    pub(in crate::point) fn queue_stats(&self) -> Option<QueueStats> {
        self.queue.get().map(|q| q.stats(self.flow.waiting()))
    }

    /// A sync call found every slot taken under a policy with a queue: waits on the
    /// thread (parked) for a slot, then enters as [`enter_in`](Self::enter_in) would.
    #[cold]
    #[inline(never)]
    pub(in crate::point) fn wait_blocking<'p>(
        &'p self,
        slot: &mut Option<Permit<'p>>,
        flags: u8,
        key: Option<&KeyArg<'_>>,
    ) -> Result<(), Downgraded> {
        let wake = Wake::Thread(std::thread::current());
        let mut wait = Wait::begin(self, wake, flags, crate::priority::current())?;
        loop {
            if let Some(entered) = wait.try_admit(slot, key) {
                return entered;
            }
            let now = self.clock.now_ns();
            if now >= wait.deadline {
                return Err(wait.time_out());
            }
            if wait.waiter.notified.load(Ordering::Acquire) {
                continue;
            }
            if self.clock.is_manual() {
                // Woken by a slot, a policy change or the clock moving.
                std::thread::park();
            } else {
                std::thread::park_timeout(Duration::from_nanos(wait.deadline - now));
            }
        }
    }
}

/// One waiting call: in the list from [`begin`](Wait::begin) until it is admitted,
/// refused, times out or is dropped (cancelled).
#[derive(Debug)]
pub(in crate::point) struct Wait<'p> {
    point: &'p Point,
    queue: &'p WaitQueue,
    waiter: Arc<Waiter>,
    /// The entry flags of the waiter's looks (`TOKEN_HELD`; `WAITER` is added).
    flags: u8,
    start: u64,
    pub(in crate::point) deadline: u64,
    done: bool,
}

impl<'p> Wait<'p> {
    /// Queues a call, or refuses it at once ([`Reason::QueueFull`], counted) when the
    /// queue is full and no waiter makes room for it. A policy changed since the call's
    /// entry to one without a queue refuses it for concurrency.
    fn begin(
        point: &'p Point,
        wake: Wake,
        flags: u8,
        priority: Priority,
    ) -> Result<Wait<'p>, Downgraded> {
        let c = point.compiled();
        let now = point.clock.now_ns();
        let queue = point.wait_queue();
        if c.rules & (ACTIVE | R_QUEUE) != ACTIVE | R_QUEUE {
            return Err(point.refuse_waiting(Reason::Concurrency, now));
        }
        let waiter = Arc::new(Waiter {
            notified: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            priority,
            wake: Mutex::new(wake),
        });
        {
            let mut list = queue.lock();
            let newest_first = c.queue_newest_first();
            if list.len() as u64 >= c.queue_max() {
                // The last waiter makes room if its tier is lower than this call's or,
                // newest first, the same (it is then the oldest of its tier); else this
                // call is refused.
                match list.back() {
                    Some(last)
                        if last.priority < priority
                            || (newest_first && last.priority == priority) =>
                    {
                        let victim = list.pop_back().unwrap_or_else(|| unreachable!());
                        victim.evicted.store(true, Ordering::Release);
                        victim.wake();
                        if victim.notified.load(Ordering::Acquire) {
                            WaitQueue::wake_one_locked(&list);
                        }
                    }
                    _ => {
                        drop(list);
                        queue.ends[FULL].fetch_add(1, Ordering::Relaxed);
                        return Err(point.refuse_waiting(Reason::QueueFull, now));
                    }
                }
            }
            // Higher tiers first; within a tier, behind its waiters or, newest first,
            // in front of them.
            let at = list
                .iter()
                .position(|w| w.priority < priority || (newest_first && w.priority == priority))
                .unwrap_or(list.len());
            list.insert(at, waiter.clone());
            point.flow.wait_begin();
            queue.peak.fetch_max(list.len() as u64, Ordering::Relaxed);
        }
        Ok(Wait {
            point,
            queue,
            waiter,
            flags,
            start: now,
            deadline: now.saturating_add(c.queue_wait_ns()),
            done: false,
        })
    }

    /// Asks for a slot if this waiter is the first or was woken: `Some` when the wait
    /// is over (admitted, or refused by a rule: counted there), `None` to wait on.
    fn try_admit(
        &mut self,
        slot: &mut Option<Permit<'p>>,
        key: Option<&KeyArg<'_>>,
    ) -> Option<Result<(), Downgraded>> {
        if self.waiter.evicted.load(Ordering::Acquire) {
            // Out of the queue already (the evicting call removed it).
            self.end(EVICTED);
            let now = self.point.clock.now_ns();
            return Some(Err(self.point.refuse_waiting(Reason::QueueFull, now)));
        }
        let mut list = self.queue.lock();
        let woken = self.waiter.notified.swap(false, Ordering::AcqRel);
        let first = list.front().is_some_and(|w| Arc::ptr_eq(w, &self.waiter));
        if !woken && !first {
            return None;
        }
        let entered = match self.point.enter_once(slot, WAITER | self.flags, key) {
            Entry::WaitQueue => return None,
            Entry::Admitted => Ok(()),
            Entry::Refused(reason) => Err(reason.downgraded(self.point.name)),
            // A waiter holds its tokens (`TOKEN_HELD`, `KEY_HELD`): never told to wait
            // for one again; if it were, it is refused as for its key.
            Entry::WaitToken(_) | Entry::WaitKey(_) => {
                debug_assert!(false, "a waiter holding its tokens told to wait for one");
                Err(Downgraded {
                    point: self.point.name,
                    reason: Reason::HotKey,
                })
            }
        };
        remove(&mut list, &self.waiter);
        if entered.is_err() && woken {
            // The slot this waiter was woken for is someone else's now.
            WaitQueue::wake_one_locked(&list);
        }
        drop(list);
        self.end(if entered.is_ok() { ADMITTED } else { REFUSED });
        Some(entered)
    }

    /// The wait ran out: leaves the queue (passing a wake on) and is refused
    /// ([`Reason::QueueTimeout`], counted).
    fn time_out(mut self) -> Downgraded {
        self.leave();
        self.end(TIMED_OUT);
        self.point
            .refuse_waiting(Reason::QueueTimeout, self.point.clock.now_ns())
    }

    /// Leaves the list; a wake this waiter had not used goes to the next one.
    fn leave(&self) {
        let mut list = self.queue.lock();
        remove(&mut list, &self.waiter);
        if self.waiter.notified.load(Ordering::Acquire) {
            WaitQueue::wake_one_locked(&list);
        }
    }

    fn end(&mut self, how: usize) {
        self.done = true;
        self.point.flow.wait_end();
        let q = self.queue;
        q.ends[how].fetch_add(1, Ordering::Relaxed);
        let waited = self.point.clock.now_ns().saturating_sub(self.start);
        q.wait_ns.fetch_add(waited, Ordering::Relaxed);
        q.max_wait_ns.fetch_max(waited, Ordering::Relaxed);
        q.report_max_ns.fetch_max(waited, Ordering::Relaxed);
    }

    /// Registers the task to wake (async waiters).
    fn set_waker(&self, waker: &Waker) {
        let mut wake = self.waiter.wake.lock().recover();
        match &mut *wake {
            Wake::Task(Some(w)) if w.will_wake(waker) => {}
            other => *other = Wake::Task(Some(waker.clone())),
        }
    }
}

impl Drop for Wait<'_> {
    /// A waiter dropped while waiting (its caller gave up): out of the queue, never
    /// with a slot.
    fn drop(&mut self) {
        if !self.done {
            self.leave();
            self.end(CANCELLED);
        }
    }
}

// ---- async waiting ----

/// What an async call's entry decided: at once, or after a wait.
#[derive(Debug)]
pub enum Admission<'a, 'p> {
    /// Decided: admitted (the permit in the slot) or refused.
    Ready(Result<(), Downgraded>),
    /// The call waits (for its reserved token, or in the queue for a slot): await it.
    Wait(WaitFuture<'a, 'p>),
}

/// What an async call waits for.
#[derive(Debug)]
enum Stage<'p> {
    /// The token it reserved, due `ns` after the wait began.
    Token { ns: u64 },
    /// A slot, in the queue (the entry made at the first poll).
    Queue(Option<Wait<'p>>),
}

/// Where a waiting call's permit goes once it is admitted: the caller's slot, or the
/// wait's own (see [`WaitFuture::detach`]).
#[derive(Debug)]
enum SlotRef<'a, 'p> {
    Caller(&'a mut Option<Permit<'p>>),
    // Made only by `WaitFuture::detach`, for the tower layer.
    #[cfg_attr(not(feature = "tower"), allow(dead_code))]
    Own(Option<Permit<'p>>),
}

impl<'p> SlotRef<'_, 'p> {
    fn get(&mut self) -> &mut Option<Permit<'p>> {
        match self {
            SlotRef::Caller(slot) => slot,
            SlotRef::Own(slot) => slot,
        }
    }
}

/// An async call waiting for its token or in the queue; see [`Admission::Wait`].
/// Dropping it ends the wait: out of the queue, no slot taken, the call never began
/// (a reserved token stays spent).
#[derive(Debug)]
pub struct WaitFuture<'a, 'p> {
    point: &'p Point,
    slot: SlotRef<'a, 'p>,
    /// The generated code's "nothing to record" flag: set while the call waits (a call
    /// dropped then never began), cleared once it is admitted.
    done: Option<&'a mut bool>,
    flags: u8,
    /// The call's key, if it has one: its text copied, so that the wait is `Send`
    /// whatever the key's type (a `KeyArg` shows its key through a `&dyn Display`).
    key: Option<WaitingKey>,
    /// The caller's priority when it entered (the wait may be polled elsewhere).
    priority: Priority,
    stage: Stage<'p>,
    #[cfg(feature = "tokio")]
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl Point {
    /// The async form of the entry: never blocks. With a queue and every slot taken,
    /// or a token bucket that waits and no token now, the call waits in the returned
    /// future. `done` is the generated code's guard flag, if any (see [`WaitFuture`]).
    #[inline(always)]
    pub(crate) fn enter_async_in<'p, 'a>(
        &'p self,
        slot: &'a mut Option<Permit<'p>>,
        done: Option<&'a mut bool>,
    ) -> Admission<'a, 'p> {
        self.enter_async_keyed_in(slot, done, None)
    }

    /// [`enter_async_in`](Self::enter_async_in) of a call with a key (see
    /// [`Point::enter_key`]).
    #[inline(always)]
    pub(crate) fn enter_async_keyed_in<'p, 'a>(
        &'p self,
        slot: &'a mut Option<Permit<'p>>,
        done: Option<&'a mut bool>,
        key: Option<KeyArg<'a>>,
    ) -> Admission<'a, 'p> {
        if !self.sampler_armed() {
            self.arm_sampler();
        }
        // On the system clock a wait needs tokio's timer; without it, an async call
        // does not wait (refused as without the queue or the wait).
        let flags = if cfg!(feature = "tokio") || self.clock.is_manual() {
            0
        } else {
            NO_WAIT
        };
        match self.enter_once(slot, flags, key.as_ref()) {
            Entry::Admitted => Admission::Ready(Ok(())),
            entry => self.wait_async(slot, done, entry, key),
        }
    }

    /// After the first look said no: the refusal, or a wait for the signal it gave.
    #[cold]
    #[inline(never)]
    pub(in crate::point) fn wait_async<'p, 'a>(
        &'p self,
        slot: &'a mut Option<Permit<'p>>,
        mut done: Option<&'a mut bool>,
        entry: Entry,
        key: Option<KeyArg<'a>>,
    ) -> Admission<'a, 'p> {
        let mut flags = TOKEN_HELD;
        let stage = match entry {
            Entry::Admitted => return Admission::Ready(Ok(())),
            Entry::Refused(reason) => return self.refused(reason.reason()),
            Entry::WaitQueue => Stage::Queue(None),
            Entry::WaitToken(ns) => Stage::Token { ns },
            Entry::WaitKey(ns) => {
                flags |= KEY_HELD;
                Stage::Token { ns }
            }
        };
        if let Some(d) = done.as_deref_mut() {
            *d = true;
        }
        Admission::Wait(WaitFuture {
            point: self,
            slot: SlotRef::Caller(slot),
            done,
            flags,
            key: key.as_ref().map(WaitingKey::of),
            priority: crate::priority::current(),
            stage,
            #[cfg(feature = "tokio")]
            sleep: None,
        })
    }

    fn refused<'a, 'p>(&self, reason: Reason) -> Admission<'a, 'p> {
        Admission::Ready(Err(Downgraded {
            point: self.name,
            reason,
        }))
    }
}

impl<'p> WaitFuture<'_, 'p> {
    /// This wait with a slot of its own in place of the caller's (still empty: the
    /// call is not admitted yet), so that it borrows nothing but the point: the tower
    /// layer keeps it in its response future, and takes the permit with
    /// [`take_permit`](Self::take_permit) once the wait is over. Only for a wait
    /// without the generated code's `done` flag.
    #[cfg(feature = "tower")]
    pub(crate) fn detach<'b>(self) -> WaitFuture<'b, 'p> {
        debug_assert!(self.done.is_none(), "a detached wait has no `done` flag");
        let WaitFuture {
            point,
            mut slot,
            done: _,
            flags,
            key,
            priority,
            stage,
            #[cfg(feature = "tokio")]
            sleep,
        } = self;
        debug_assert!(slot.get().is_none(), "a waiting call holds no permit");
        WaitFuture {
            point,
            slot: SlotRef::Own(None),
            done: None,
            flags,
            key,
            priority,
            stage,
            #[cfg(feature = "tokio")]
            sleep,
        }
    }

    /// The permit of a call this wait admitted, if any (a call on a point without
    /// policy or breaker has none): out of the wait's own slot (see
    /// [`detach`](Self::detach)).
    #[cfg(feature = "tower")]
    pub(crate) fn take_permit(&mut self) -> Option<Permit<'p>> {
        self.slot.get().take()
    }

    /// The wait is over with `entered`: admitted calls are recorded from now on.
    fn finish(
        &mut self,
        entered: Result<(), Downgraded>,
    ) -> std::task::Poll<Result<(), Downgraded>> {
        if let (Ok(()), Some(done)) = (&entered, self.done.as_deref_mut()) {
            *done = false;
        }
        std::task::Poll::Ready(entered)
    }

    /// Whether the tokio timer of `ns` from the first call has fired (a manual clock
    /// is advanced by `ns` at once instead).
    fn slept(&mut self, ns: u64, cx: &mut std::task::Context<'_>) -> bool {
        if self.point.clock.is_manual() {
            self.point.clock.sleep(Duration::from_nanos(ns));
            return true;
        }
        #[cfg(feature = "tokio")]
        {
            let sleep = self
                .sleep
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(Duration::from_nanos(ns))));
            if std::future::Future::poll(sleep.as_mut(), cx).is_ready() {
                self.sleep = None;
                return true;
            }
            false
        }
        #[cfg(not(feature = "tokio"))]
        {
            let _ = cx;
            true
        }
    }
}

impl std::future::Future for WaitFuture<'_, '_> {
    type Output = Result<(), Downgraded>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::Poll;
        let this = self.get_mut();
        loop {
            match &mut this.stage {
                Stage::Token { ns } => {
                    let ns = *ns;
                    if !this.slept(ns, cx) {
                        return Poll::Pending;
                    }
                    // The token is due: the other rules, holding it.
                    let key = this.key.as_ref().map(WaitingKey::arg);
                    match this
                        .point
                        .enter_once(this.slot.get(), this.flags, key.as_ref())
                    {
                        Entry::Admitted => return this.finish(Ok(())),
                        Entry::WaitQueue => this.stage = Stage::Queue(None),
                        // The point's token came; now the key's is reserved.
                        Entry::WaitKey(ns) if this.flags & KEY_HELD == 0 => {
                            this.flags |= KEY_HELD;
                            this.stage = Stage::Token { ns };
                        }
                        Entry::Refused(reason) => {
                            return this.finish(Err(reason.downgraded(this.point.name)))
                        }
                        // Holding its tokens, a call is never told to wait for them
                        // again; if it were, it is refused as for its key.
                        Entry::WaitToken(_) | Entry::WaitKey(_) => {
                            debug_assert!(false, "a call holding its tokens told to wait for one");
                            return this.finish(Err(Downgraded {
                                point: this.point.name,
                                reason: Reason::HotKey,
                            }));
                        }
                    }
                }
                Stage::Queue(slot_wait) => {
                    if slot_wait.is_none() {
                        let wake = Wake::Task(Some(cx.waker().clone()));
                        match Wait::begin(this.point, wake, this.flags, this.priority) {
                            Ok(w) => *slot_wait = Some(w),
                            Err(d) => return this.finish(Err(d)),
                        }
                    }
                    let Some(wait) = slot_wait.as_mut() else {
                        unreachable!("set above");
                    };
                    // The waker first: a wake after the look below must reach this task.
                    wait.set_waker(cx.waker());
                    let key = this.key.as_ref().map(WaitingKey::arg);
                    if let Some(entered) = wait.try_admit(this.slot.get(), key.as_ref()) {
                        this.stage = Stage::Queue(None);
                        return this.finish(entered);
                    }
                    let now = this.point.clock.now_ns();
                    let timed_out = now >= wait.deadline || {
                        if wait.waiter.notified.load(Ordering::Acquire) {
                            continue;
                        }
                        let left = wait.deadline - now;
                        !this.point.clock.is_manual() && this.slept(left, cx)
                    };
                    if timed_out {
                        // The timer is the deadline (the timeline may lag it a tick).
                        let Stage::Queue(Some(wait)) =
                            std::mem::replace(&mut this.stage, Stage::Queue(None))
                        else {
                            unreachable!("present");
                        };
                        return this.finish(Err(wait.time_out()));
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Point {
    /// Refuses a call for a reason of the queue (or for concurrency, when the queue
    /// went away): counted and reported like any refusal, the delay started if the
    /// policy has one.
    fn refuse_waiting(&self, reason: Reason, now: u64) -> Downgraded {
        let c = self.compiled();
        match self.refuse(c, reason, 0, false, now) {
            Err(d) => d,
            // Queue refusals are never spared, so `refuse` never admits here; if it
            // ever did, its permit ends as cancelled and the call is still refused.
            Ok(permit) => {
                drop(permit);
                Downgraded {
                    point: self.name,
                    reason,
                }
            }
        }
    }
}
