// The `async fn` forms of `retry-if-wrong-signature.rs`, with and without `hedge`.
use resilience_runtime::retry;

#[derive(Debug)]
struct MyError;

fn takes_a_string(e: String) -> bool {
    e.is_empty()
}

fn returns_unit(_: &MyError) {}

#[retry(retry_if = takes_a_string)]
async fn a() -> Result<u32, MyError> {
    Ok(1)
}

#[retry(hedge = "30ms", retry_if = returns_unit)]
async fn b() -> Result<u32, MyError> {
    Ok(1)
}

fn main() {}
