use resilience_runtime::retry;

#[retry(hedge = "10ms", hedge = "p95")]
async fn f() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
