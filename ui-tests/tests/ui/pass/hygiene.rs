// User code that shadows everything the expansion could rely on.
#![allow(dead_code, non_camel_case_types)]

use resilience_runtime::downgrade;

mod core {}
mod std {}
struct Result;
struct Ok;
struct Err;
struct Option;

#[downgrade(default)]
fn shadowed(x: u32) -> u32 {
    x
}

#[downgrade(default)]
fn uses_internal_name(__resilience_point: u32, __resilience_permit: u32) -> u32 {
    __resilience_point + __resilience_permit
}

fn main() {
    assert_eq!(shadowed(1), 1);
    assert_eq!(uses_internal_name(1, 2), 3);
}
