use resilience_runtime::retry;

#[retry(point = "no.tokio.hedge", hedge = "30ms")]
async fn f() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
