use resilience_runtime::{breaker, downgrade, Downgraded};

#[derive(Debug)]
struct E;
impl From<Downgraded> for E {
    fn from(_: Downgraded) -> Self {
        E
    }
}

#[breaker]
fn plain() -> Result<u32, E> {
    Ok(1)
}

fn fb(x: u32) -> u32 {
    x
}

#[breaker(point = "pass.breaker.fallback", fallback = fb)]
fn with_fallback(x: u32) -> u32 {
    x + 1
}

fn acceptable(e: &E) -> bool {
    let _ = e;
    false
}

#[breaker(is_exception = acceptable)]
async fn async_fn(x: u32) -> Result<u32, E> {
    Ok(x)
}

struct Client;

impl Client {
    fn cached(&self) -> u32 {
        0
    }

    #[breaker(fallback = Self::cached)]
    fn call(&self) -> u32 {
        1
    }

    #[breaker(default)]
    fn generic<T: Default>(&mut self, t: T) -> T {
        t
    }
}

#[downgrade(point = "pass.stack.a", default)]
#[breaker(point = "pass.stack.b", default)]
fn stacked_one_way() -> u32 {
    1
}

#[breaker(point = "pass.stack.c", default)]
#[downgrade(point = "pass.stack.d", default)]
fn stacked_other_way() -> u32 {
    1
}

fn main() {
    assert_eq!(plain().unwrap(), 1);
    assert_eq!(with_fallback(1), 2);
    assert_eq!(futures_executor::block_on(async_fn(3)).unwrap(), 3);
    let mut c = Client;
    assert_eq!(c.call(), 1);
    assert_eq!(c.generic(5u8), 5);
    assert_eq!(stacked_one_way() + stacked_other_way(), 2);
}
