use resilience_runtime::downgrade;

fn fb() -> u32 {
    0
}

#[downgrade(fallback = fb, default = 1)]
fn f() -> u32 {
    1
}

fn main() {}
