use resilience_runtime::retry;

#[retry(attempts = "3")]
fn a() -> Result<u32, ()> {
    Ok(1)
}

#[retry(backoff = "linear")]
fn b() -> Result<u32, ()> {
    Ok(1)
}

#[retry(jitter = 0.5)]
fn c() -> Result<u32, ()> {
    Ok(1)
}

#[retry(multiplier = 0.5)]
fn d() -> Result<u32, ()> {
    Ok(1)
}

#[retry(retry_if = "is_transient")]
fn e() -> Result<u32, ()> {
    Ok(1)
}

#[retry(budget = backend)]
fn f() -> Result<u32, ()> {
    Ok(1)
}

#[retry(backoff = "fixed", max = "1s")]
fn g() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
