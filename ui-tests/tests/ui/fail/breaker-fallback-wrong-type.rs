use resilience_runtime::breaker;

fn fb() -> &'static str {
    "x"
}

#[breaker(fallback = fb)]
fn f() -> u32 {
    1
}

fn main() {}
