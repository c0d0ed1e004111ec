// `#[retry]` retries an `Err`: a fn that returns anything but a `Result` (or an
// alias of one) is refused at its return type, saying what to write.
use resilience_runtime::retry;

#[retry]
fn count() -> u32 {
    1
}

#[retry(attempts = 2)]
fn find() -> Option<u32> {
    Some(1)
}

#[retry]
fn nothing() {}

#[retry]
fn unit() -> () {}

#[retry]
fn pair() -> (u32, u32) {
    (1, 2)
}

fn main() {}
