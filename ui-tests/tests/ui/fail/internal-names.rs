use resilience_runtime::downgrade;

#[downgrade(default)]
fn f() -> u32 {
    // the expansion's internal bindings are not visible to the body
    let _ = __resilience_point;
    1
}

fn main() {}
