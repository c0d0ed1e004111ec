use resilience_runtime::retry;

#[retry(base = "50")]
fn no_unit() -> Result<u32, ()> {
    Ok(1)
}

#[retry(max = "0s")]
fn zero() -> Result<u32, ()> {
    Ok(1)
}

#[retry(base = "1s", max = "10ms")]
fn max_below_base() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
