use resilience_runtime::retry;

#[retry(attempts = 3, key = user)]
fn get(user: u64) -> Result<u32, ()> {
    let _ = user;
    Ok(1)
}

fn main() {}
