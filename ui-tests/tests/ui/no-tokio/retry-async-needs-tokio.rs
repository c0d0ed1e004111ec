use resilience_runtime::retry;

#[retry(point = "no.tokio.retry")]
async fn f() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
