use resilience_runtime::retry;

#[retry(attempts = 3, hedge = "30ms")]
fn read() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
