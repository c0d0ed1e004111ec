use resilience_runtime::retry;

#[retry(attempts = 0)]
fn zero() -> Result<u32, ()> {
    Ok(1)
}

#[retry(attempts = 101)]
fn too_many() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
