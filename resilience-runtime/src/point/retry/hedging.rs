//! A hedged call of `#[retry(hedge = "..")]` on a point (feature `tokio`): attempts
//! started as `retry::hedge` plans them, the first answer kept, the others dropped
//! and counted on the point.

use crate::point::Point;
use crate::retry::hedge::{plan, HedgeSpec, Plan};
use crate::retry::{Retry, RetryBudget};
use std::future::Future;
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;
use tokio::time::Instant;

/// A hedged attempt: its future and when it started.
struct Hedged<F> {
    future: Pin<Box<F>>,
    started: Instant,
}

/// What ended a round.
enum Round<R> {
    /// The call's result: an answer, or a downgrade.
    Done(R),
    /// Every attempt failed with an error to retry: the last one.
    Failed(R),
}

/// Runs one hedged call (see the module docs). `make` starts an attempt: its
/// future gives the attempt's output, whether the attribute below downgraded it,
/// and whether it is an error to retry.
/// `effective` gives the call's retry settings, asked for only once they matter
/// (at the first `Pending` or failure), so an immediate answer never builds them.
pub(crate) async fn run_hedged<R, F, Fut>(
    point: &'static Point,
    budget: Option<&'static RetryBudget>,
    effective: impl Fn() -> Retry,
    spec: &'static HedgeSpec,
    mut make: F,
) -> R
where
    F: FnMut() -> Fut,
    Fut: Future<Output = (R, bool, bool)>,
{
    let mut settings: Option<Retry> = None;
    let log = spec.log();
    // Attempts started in all, backoffs waited, whether the budget refused a hedge.
    let (mut started, mut round, mut refused) = (0u32, 0u32, false);
    let mut first = pin!(None::<Fut>);
    let mut timer = pin!(None::<tokio::time::Sleep>);
    let mut hedges: Vec<Hedged<Fut>> = Vec::new();
    loop {
        first.set(Some(make()));
        started += 1;
        // When the latest attempt started: taken before the first poll only when
        // latencies are measured, else at its first `Pending`.
        let mut first_started = log.map(|_| Instant::now());
        let mut last_started = first_started;
        let mut delay = None;
        let mut last_error = None;
        let ended = std::future::poll_fn(|cx| loop {
            let mut answer = None;
            if let Some(f) = first.as_mut().as_pin_mut() {
                if let Poll::Ready(out) = f.poll(cx) {
                    first.set(None);
                    if let (Some((log, tenths)), Some(at), false) = (log, first_started, out.1) {
                        log.record(at.elapsed(), tenths);
                    }
                    answer = Some(out);
                }
            }
            let mut i = 0;
            while answer.is_none() && i < hedges.len() {
                match hedges[i].future.as_mut().poll(cx) {
                    Poll::Ready(out) => {
                        let h = hedges.remove(i);
                        if let (Some((log, tenths)), false) = (log, out.1) {
                            log.record(h.started.elapsed(), tenths);
                        }
                        answer = Some(out);
                    }
                    Poll::Pending => i += 1,
                }
            }
            match answer {
                Some((out, refused_attempt, again)) if refused_attempt || !again => {
                    // The call's answer: drop every other attempt, now.
                    let mut dropped = u64::from(first.is_some());
                    if let (Some((log, tenths)), Some(at), true) =
                        (log, first_started, first.is_some())
                    {
                        log.record(at.elapsed(), tenths);
                    }
                    first.set(None);
                    dropped += hedges.len() as u64;
                    if let Some((log, tenths)) = log {
                        for h in &hedges {
                            log.record(h.started.elapsed(), tenths);
                        }
                    }
                    hedges.clear();
                    point.count_hedges_cancelled(dropped);
                    timer.set(None);
                    return Poll::Ready(Round::Done(out));
                }
                Some((out, _, _)) => {
                    // An error to retry: the others go on; poll them again.
                    last_error = Some(out);
                    continue;
                }
                None => {}
            }
            if first.is_none() && hedges.is_empty() {
                timer.set(None);
                return Poll::Ready(Round::Failed(
                    last_error.take().expect("a round's attempts all failed"),
                ));
            }
            // Every attempt running is pending: hedge?
            if first_started.is_none() {
                first_started = Some(Instant::now());
                last_started = first_started;
            }
            if delay.is_none() {
                delay = Some(spec.delay());
            }
            let since_last = last_started.map_or(Duration::ZERO, |at| at.elapsed());
            let attempts = settings.get_or_insert_with(&effective).attempts;
            match plan(
                delay.flatten(),
                u64::from(started),
                attempts,
                refused,
                since_last,
            ) {
                Plan::Never => {
                    timer.set(None);
                    return Poll::Pending;
                }
                Plan::Wait(left) => {
                    // The delay after the latest start (both are set by now).
                    let at = match (last_started, delay.flatten()) {
                        (Some(start), Some(d)) => start + d,
                        _ => Instant::now() + left,
                    };
                    match timer.as_mut().as_pin_mut() {
                        // Armed for then already (woken by an attempt): keep it.
                        Some(sleep) if sleep.deadline() == at => {}
                        Some(sleep) => sleep.reset(at),
                        None => timer.set(Some(tokio::time::sleep_until(at))),
                    }
                    let sleep = timer.as_mut().as_pin_mut().expect("armed above");
                    if sleep.poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    // Already due: decide again.
                }
                Plan::Hedge => {
                    if point.try_hedge(budget) {
                        started += 1;
                        let at = Instant::now();
                        last_started = Some(at);
                        hedges.push(Hedged {
                            future: Box::pin(make()),
                            started: at,
                        });
                    } else {
                        refused = true;
                    }
                }
            }
        })
        .await;
        match ended {
            Round::Done(out) => return out,
            Round::Failed(err) => {
                let retry = settings.get_or_insert_with(&effective);
                let Some(wait) = point.retry_after_round(retry, budget, started, round) else {
                    return err;
                };
                round += 1;
                let clock = point.retry_clock();
                if clock.is_manual() {
                    clock.sleep(wait);
                } else {
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}
