//! `timeout = "..."` and `fallback_with_reason` on every shape: free fns and methods,
//! sync and async, generic or not, with a fallback, a default or `Err(From)`, under
//! `#[downgrade]` and `#[breaker]`. Run on tokio's paused clock: a 1 s body under a
//! 100 ms timeout is cut without waiting.

use resilience_runtime::{breaker, downgrade, Downgraded, Reason};
use std::time::Duration;

#[derive(Debug, PartialEq)]
enum E {
    Cut(Reason),
}

impl From<Downgraded> for E {
    fn from(d: Downgraded) -> Self {
        E::Cut(d.reason())
    }
}

async fn slow(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

// ---- free async fns

async fn cached(id: u32, name: &str, tags: Vec<String>) -> String {
    format!("cached {id} {name} {}", tags.len())
}

// The body only borrows `tags`, so the fallback still gets it after a cut.
#[downgrade(point = "pass.timeout.fallback", timeout = "100ms", fallback = cached)]
async fn fetch(id: u32, name: &str, tags: Vec<String>) -> String {
    slow(u64::from(id)).await;
    format!("{id} {name} {}", tags.len())
}

#[downgrade(point = "pass.timeout.default", timeout = "0.1s", default = 7)]
async fn count(ms: u64) -> u32 {
    slow(ms).await;
    1
}

#[downgrade(point = "pass.timeout.err", timeout = "100ms")]
async fn load(ms: u64) -> Result<u32, E> {
    slow(ms).await;
    Ok(1)
}

async fn why(id: u32, d: Downgraded) -> String {
    format!("{id}: {} at {}", d.reason(), d.point())
}

#[downgrade(point = "pass.timeout.reason", timeout = "1m 30s", fallback_with_reason = why)]
async fn reasoned(id: u32) -> String {
    slow(u64::from(id) * 1000).await;
    id.to_string()
}

// A generic fn, the fallback named with its turbofish.
async fn generic_fb<T: ToString>(t: T, d: Downgraded) -> String {
    format!("{} {}", t.to_string(), d.reason())
}

#[downgrade(timeout = "100ms", fallback_with_reason = generic_fb::<T>)]
async fn generic<T: ToString>(t: T) -> String
where
    T: Send,
{
    slow(1000).await;
    t.to_string()
}

// Patterns in the signature are rebound for the fallback.
async fn pair_fb((a, b): (u32, u32), _: u8, _d: Downgraded) -> u32 {
    a * b
}

#[downgrade(timeout = "100ms", fallback_with_reason = pair_fb)]
async fn pair((a, b): (u32, u32), _: u8) -> u32 {
    slow(u64::from(a)).await;
    a + b
}

// ---- methods

struct Svc {
    base: u32,
}

impl Svc {
    async fn fb(&self, x: u32, d: Downgraded) -> Result<u32, E> {
        assert_eq!(d.reason(), Reason::Deadline);
        Ok(self.base + x + 1000)
    }

    #[downgrade(point = "pass.timeout.method", timeout = "100ms", fallback_with_reason = Self::fb)]
    async fn get(&self, x: u32) -> Result<u32, E> {
        slow(u64::from(x)).await;
        Ok(self.base + x)
    }

    async fn fb_mut(&mut self, d: Downgraded) -> u32 {
        assert_eq!(d.reason(), Reason::Deadline);
        self.base
    }

    #[breaker(point = "pass.timeout.breaker", timeout = "100ms", fallback_with_reason = Self::fb_mut)]
    async fn bump(&mut self) -> u32 {
        self.base += 1;
        slow(1000).await;
        self.base
    }

    fn sync_fb(&self, x: u32, _: Downgraded) -> u32 {
        x
    }

    // `fallback_with_reason` without `timeout`, on a sync method.
    #[downgrade(fallback_with_reason = Self::sync_fb)]
    fn sync_get(&self, x: u32) -> u32 {
        self.base + x
    }

    #[breaker(timeout = "100ms", default)]
    async fn generic_method<T: Into<u32> + Send>(&self, t: T) -> u32 {
        slow(1000).await;
        t.into() + self.base
    }
}

// ---- sync fns with fallback_with_reason

fn sync_fb<T: Clone>(t: &T, _: Downgraded) -> T {
    t.clone()
}

#[downgrade(fallback_with_reason = sync_fb)]
fn sync_generic<T: Clone>(t: &T) -> T {
    t.clone()
}

#[tokio::main(flavor = "current_thread", start_paused = true)]
async fn main() {
    let tags = vec!["a".to_owned(), "b".to_owned()];
    assert_eq!(fetch(10, "x", tags.clone()).await, "10 x 2");
    assert_eq!(fetch(1000, "x", tags).await, "cached 1000 x 2");

    assert_eq!(count(10).await, 1);
    assert_eq!(count(1000).await, 7);

    assert_eq!(load(10).await, Ok(1));
    assert_eq!(load(1000).await, Err(E::Cut(Reason::Deadline)));

    assert_eq!(reasoned(1).await, "1");
    assert_eq!(reasoned(100).await, "100: deadline at pass.timeout.reason");
    assert_eq!(generic(5u8).await, "5 deadline");
    assert_eq!(pair((3, 4), 0).await, 7);
    assert_eq!(pair((300, 4), 0).await, 1200);

    let mut svc = Svc { base: 1 };
    assert_eq!(svc.get(10).await, Ok(11));
    assert_eq!(svc.get(500).await, Ok(1501));
    // The body ran until its deadline: its side effect stays.
    assert_eq!(svc.bump().await, 2);
    assert_eq!(svc.sync_get(2), 4);
    assert_eq!(svc.generic_method(3u8).await, 0);
    assert_eq!(sync_generic(&"s".to_owned()), "s");
}
