use resilience_runtime::{breaker, downgrade};

#[downgrade(point = "x", timeout = "200ms", default)]
fn read_file() -> u32 {
    1
}

struct Svc;

impl Svc {
    #[breaker(timeout = "1s", default)]
    fn call(&self) -> u32 {
        1
    }
}

fn main() {}
