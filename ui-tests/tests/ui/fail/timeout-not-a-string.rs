use resilience_runtime::downgrade;

#[downgrade(timeout = 200, default)]
async fn bare_number() -> u32 {
    1
}

#[downgrade(timeout = std::time::Duration::from_millis(200), default)]
async fn expression() -> u32 {
    1
}

fn main() {}
