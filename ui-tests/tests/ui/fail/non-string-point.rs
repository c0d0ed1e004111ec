use resilience_runtime::downgrade;

#[downgrade(point = order_create, default)]
fn f() -> u32 {
    1
}

fn main() {}
