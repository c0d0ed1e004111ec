use resilience_runtime::downgrade;

#[downgrade(point = "x", fallbak = fb)]
fn f() -> u32 {
    1
}

fn fb() -> u32 {
    0
}

fn main() {}
