#![deny(dead_code)]

use resilience_runtime::downgrade;

#[downgrade(default)]
fn never_called() -> u32 {
    1
}

fn main() {}
