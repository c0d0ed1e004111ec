use resilience_runtime::downgrade;

#[downgrade(point = "x")]
fn f() -> u32 {
    1
}

fn main() {}
