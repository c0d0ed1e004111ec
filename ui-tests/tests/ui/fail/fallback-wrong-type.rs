use resilience_runtime::downgrade;

fn fb(_x: u32) -> String {
    String::new()
}

#[downgrade(fallback = fb)]
fn f(x: u32) -> u32 {
    x
}

fn main() {}
