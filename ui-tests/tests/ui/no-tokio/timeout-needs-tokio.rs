use resilience_runtime::downgrade;

#[downgrade(point = "no.tokio", timeout = "200ms", default)]
async fn f() -> u32 {
    1
}

fn main() {}
