use resilience_runtime::retry;

#[retry(hedge = "p101")]
async fn too_high() -> Result<u32, ()> {
    Ok(1)
}

#[retry(hedge = "fast")]
async fn not_a_value() -> Result<u32, ()> {
    Ok(1)
}

#[retry(hedge = 30)]
async fn not_a_string() -> Result<u32, ()> {
    Ok(1)
}

#[retry(attempts = 1, hedge = "10ms")]
async fn nothing_to_hedge_with() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
