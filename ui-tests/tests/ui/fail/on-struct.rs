use resilience_runtime::downgrade;

#[downgrade(default)]
struct S;

fn main() {}
