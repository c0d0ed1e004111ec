//! `#[retry]` on every shape it supports: sync and async, free fns and methods,
//! generic, with patterns, references and `mut` arguments, stacked above and below
//! `#[downgrade]` / `#[breaker]`, with every argument.

use resilience_runtime::{breaker, downgrade, retry, Downgraded};

#[derive(Debug, Clone, PartialEq)]
enum E {
    Busy,
    Down,
}

impl From<Downgraded> for E {
    fn from(_: Downgraded) -> Self {
        E::Down
    }
}

fn is_busy(e: &E) -> bool {
    *e == E::Busy
}

#[retry]
fn plain() -> Result<u32, E> {
    Ok(1)
}

#[retry(
    point = "pass.retry.all",
    attempts = 5,
    backoff = "exponential",
    base = "1ms",
    max = "4ms",
    multiplier = 2.0,
    jitter = "equal",
    retry_if = is_busy,
    budget = "pass.budget",
)]
fn every_argument(
    x: u32,
    mut name: String,
    (a, b): (u8, u8),
    r: &str,
    m: &mut Vec<u8>,
) -> Result<u32, E> {
    name.push_str(r);
    m.push(a + b);
    Ok(x + name.len() as u32)
}

#[retry(attempts = 2, backoff = "fixed", base = "1ms", jitter = "none")]
fn generic<T: Clone + std::fmt::Debug>(t: T) -> Result<T, E> {
    Ok(t)
}

struct Client {
    calls: u32,
}

impl Client {
    #[retry(attempts = 2, base = "1ms")]
    fn get(&self, id: u32) -> Result<u32, E> {
        Ok(id + self.calls)
    }

    #[retry(attempts = 2, base = "1ms")]
    fn bump(&mut self) -> Result<u32, E> {
        self.calls += 1;
        Ok(self.calls)
    }

    #[retry(attempts = 2, base = "1ms")]
    async fn get_async(&self, id: u32) -> Result<u32, E> {
        Ok(id + self.calls)
    }
}

#[retry(attempts = 3, base = "1ms")]
#[downgrade(point = "pass.retry.above", default = Ok(0))]
fn above() -> Result<u32, E> {
    Ok(1)
}

#[retry(attempts = 3, base = "1ms")]
#[breaker(point = "pass.retry.breaker")]
#[downgrade(point = "pass.retry.both")]
fn above_both() -> Result<u32, E> {
    Ok(1)
}

#[downgrade(point = "pass.retry.below", default = Ok(0))]
#[retry(attempts = 3, base = "1ms")]
fn below() -> Result<u32, E> {
    Ok(1)
}

#[retry(attempts = 3, base = "1ms")]
#[downgrade(point = "pass.retry.async", fallback = fallback)]
async fn above_async(id: u32) -> Result<u32, E> {
    Ok(id)
}

async fn fallback(_id: u32) -> Result<u32, E> {
    Err(E::Down)
}

// Aliases of `Result` are `Result`s: the macro cannot see through them, rustc can.
mod aliases {
    /// A crate's own `Result`, as `anyhow::Result<T>` is.
    pub type Result<T, E = super::E> = std::result::Result<T, E>;
}

impl E {
    fn is_busy(&self) -> bool {
        *self == E::Busy
    }
}

trait Transient {
    fn transient(&self) -> bool;
}

impl Transient for E {
    fn transient(&self) -> bool {
        self.is_busy()
    }
}

/// A generic predicate: `E` inferred from the fn's error type.
fn any_error<T: std::fmt::Debug>(_: &T) -> bool {
    true
}

#[retry(attempts = 2, base = "1ms")]
fn io_alias(path: &str) -> std::io::Result<usize> {
    Ok(path.len())
}

#[retry(attempts = 2, base = "1ms", retry_if = E::is_busy)]
fn local_alias() -> aliases::Result<u32> {
    Ok(1)
}

#[retry(attempts = 2, base = "1ms", retry_if = <E as Transient>::transient)]
fn core_result() -> core::result::Result<u32, E> {
    Ok(1)
}

#[retry(attempts = 2, base = "1ms", retry_if = any_error)]
async fn async_alias() -> std::io::Result<u32> {
    Ok(1)
}

#[retry(attempts = 2, base = "1ms", retry_if = Transient::transient)]
fn impl_ok() -> Result<impl std::fmt::Display, E> {
    Ok(1)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(plain(), Ok(1));
    let mut m = Vec::new();
    assert_eq!(every_argument(1, "ab".into(), (1, 2), "c", &mut m), Ok(4));
    assert_eq!(m, [3]);
    assert_eq!(generic("x"), Ok("x"));
    let mut client = Client { calls: 0 };
    assert_eq!(client.bump(), Ok(1));
    assert_eq!(client.get(1), Ok(2));
    assert_eq!(client.get_async(2).await, Ok(3));
    assert_eq!(above(), Ok(1));
    assert_eq!(above_both(), Ok(1));
    assert_eq!(below(), Ok(1));
    assert_eq!(above_async(7).await, Ok(7));
    assert_eq!(io_alias("ab").unwrap(), 2);
    assert_eq!(local_alias(), Ok(1));
    assert_eq!(core_result(), Ok(1));
    assert_eq!(async_alias().await.unwrap(), 1);
    assert_eq!(impl_ok().map(|v| v.to_string()), Ok("1".to_owned()));
}
