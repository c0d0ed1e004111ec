use resilience_runtime::breaker;

#[breaker]
fn f() -> u32 {
    1
}

fn main() {}
