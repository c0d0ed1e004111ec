use resilience_runtime::retry;

#[retry(attempts = 3, attempts = 4)]
fn f() -> Result<u32, ()> {
    Ok(1)
}

fn main() {}
