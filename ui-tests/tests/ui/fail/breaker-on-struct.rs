use resilience_runtime::breaker;

#[breaker(default)]
struct S;

fn main() {}
