//! `#[retry(hedge = "..")]` on the async shapes it supports: free fns and `&self`
//! methods, generic, with patterns, shared references and `mut` arguments, `?` in the
//! body, stacked above `#[downgrade]` / `#[breaker]`, fixed and percentile delays,
//! every other argument; the call's future stays `Send`.

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

fn parse(s: &str) -> Result<u32, E> {
    s.parse().map_err(|_| E::Busy)
}

#[retry(hedge = "30ms")]
async fn plain() -> Result<u32, E> {
    Ok(1)
}

#[retry(
    point = "pass.hedge.all",
    attempts = 5,
    backoff = "exponential",
    base = "1ms",
    max = "4ms",
    multiplier = 2.0,
    jitter = "equal",
    retry_if = is_busy,
    budget = "pass.hedge.budget",
    hedge = "p99.9",
)]
async fn every_argument(x: u32, mut name: String, (a, b): (u8, u8), r: &str) -> Result<u32, E> {
    name.push_str(r);
    let n = parse("2")?;
    Ok(x + name.len() as u32 + u32::from(a + b) + n)
}

#[retry(attempts = 2, hedge = "1ms")]
async fn generic<T: Clone + std::fmt::Debug + Send>(t: T) -> Result<T, E> {
    Ok(t)
}

struct Client {
    calls: u32,
}

impl Client {
    #[retry(attempts = 2, hedge = "p50")]
    async fn get(&self, id: u32) -> Result<u32, E> {
        Ok(id + self.calls)
    }
}

#[retry(attempts = 3, hedge = "5ms")]
#[breaker(point = "pass.hedge.breaker")]
#[downgrade(point = "pass.hedge.both", fallback = fallback)]
async fn above_both(id: u32) -> Result<u32, E> {
    Ok(id)
}

async fn fallback(_id: u32) -> Result<u32, E> {
    Err(E::Down)
}

fn is_send<T: Send>(t: T) -> T {
    t
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    assert_eq!(plain().await, Ok(1));
    assert_eq!(every_argument(1, "ab".into(), (1, 2), "c").await, Ok(9));
    assert_eq!(generic("x").await, Ok("x"));
    let client = Client { calls: 1 };
    assert_eq!(is_send(client.get(1)).await, Ok(2));
    assert_eq!(is_send(above_both(7)).await, Ok(7));
}
