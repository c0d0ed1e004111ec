// A `retry_if` predicate returns `bool`: `true` to retry.
use resilience_runtime::retry;

#[derive(Debug)]
struct MyError;

fn returns_unit(_: &MyError) {}

fn returns_an_option(_: &MyError) -> Option<bool> {
    Some(true)
}

#[retry(retry_if = returns_unit)]
fn a() -> Result<u32, MyError> {
    Ok(1)
}

#[retry(retry_if = returns_an_option)]
fn b() -> Result<u32, MyError> {
    Ok(1)
}

fn main() {}
