use resilience_runtime::retry;

fn takes_a_string(_: &String) -> bool {
    true
}

fn returns_unit(_: &u32) {}

#[retry(retry_if = takes_a_string)]
fn wrong_argument() -> Result<u32, u32> {
    Ok(1)
}

#[retry(retry_if = returns_unit)]
fn wrong_return() -> Result<u32, u32> {
    Ok(1)
}

fn main() {}
