use resilience_runtime::downgrade;

#[downgrade(timeout = "100ms", default, timeout = "1s")]
async fn f() -> u32 {
    1
}

fn main() {}
