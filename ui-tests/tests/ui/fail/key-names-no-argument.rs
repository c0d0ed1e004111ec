use resilience_runtime::{breaker, downgrade};

#[downgrade(point = "ui.key.typo", default, key = usr_id)]
fn get(user_id: u64) -> u32 {
    let _ = user_id;
    1
}

// The first name of a field or method call is checked.
#[breaker(point = "ui.key.method", default, key = requst.tenant())]
fn tenant(request: &Request, retries: u8) -> u32 {
    let _ = (request, retries);
    1
}

struct Request;

impl Request {
    fn tenant(&self) -> &str {
        "t"
    }

    #[downgrade(point = "ui.key.self", default, key = id)]
    fn by_id(&self) -> u32 {
        1
    }
}

#[downgrade(point = "ui.key.none", default, key = user)]
fn no_arguments() -> u32 {
    1
}

// With a fallback, a name bound by a pattern argument is not in scope at the entry.
#[downgrade(point = "ui.key.pattern", fallback = fb, key = a)]
fn pattern((a, b): (u64, u64)) -> u64 {
    a + b
}

fn fb(pair: (u64, u64)) -> u64 {
    pair.0
}

fn main() {}
