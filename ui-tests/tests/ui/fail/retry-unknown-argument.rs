use resilience_runtime::retry;

#[retry(atempts = 3)]
fn typo() -> Result<u32, ()> {
    Ok(1)
}

#[retry(backof = "fixed")]
fn typo2() -> Result<u32, ()> {
    Ok(1)
}

#[retry(fallback = f)]
fn not_an_argument() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
