use resilience_runtime::{breaker, downgrade};

#[downgrade(timeout = "0ms", default)]
async fn f() -> u32 {
    1
}

#[breaker(timeout = "0s", default)]
async fn g() -> u32 {
    1
}

fn main() {}
