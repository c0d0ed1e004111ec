use resilience_runtime::downgrade;

fn fb() -> u32 {
    0
}

#[downgrade(fallback = fb)]
fn f(x: u32) -> u32 {
    x
}

fn main() {}
