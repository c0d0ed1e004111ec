use resilience_runtime::downgrade;

#[downgrade(point = "a", point = "b", default)]
fn f() -> u32 {
    1
}

fn main() {}
