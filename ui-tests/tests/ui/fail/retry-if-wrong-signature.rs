// `retry_if` takes `fn(&E) -> bool`, `E` the fn's error type: a predicate that takes
// something else is refused at `retry_if = ...`, saying what to write.
use resilience_runtime::retry;

#[derive(Debug)]
struct MyError;

fn takes_a_string(e: String) -> bool {
    e.is_empty()
}

fn takes_another_error(_: &std::io::Error) -> bool {
    true
}

fn takes_the_error_by_value(_: MyError) -> bool {
    true
}

fn takes_two(_: &MyError, attempt: u32) -> bool {
    attempt < 2
}

#[retry(retry_if = takes_a_string)]
fn a() -> Result<u32, MyError> {
    Ok(1)
}

#[retry(retry_if = takes_another_error)]
fn b() -> Result<u32, MyError> {
    Ok(1)
}

#[retry(retry_if = takes_the_error_by_value)]
fn c() -> Result<u32, MyError> {
    Ok(1)
}

#[retry(retry_if = takes_two)]
fn d() -> Result<u32, MyError> {
    Ok(1)
}

fn main() {}
