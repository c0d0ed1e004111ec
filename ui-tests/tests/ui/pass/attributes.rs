#![deny(clippy::all)]

use resilience_runtime::downgrade;

/// Docs stay.
#[must_use]
#[inline]
#[downgrade(default)]
#[allow(clippy::needless_return)]
fn kept() -> u32 {
    #![allow(unused_mut)]
    let mut x = 1;
    return x;
}

#[downgrade(default = 1)]
#[downgrade(default = 2)]
fn stacked() -> u32 {
    3
}

mod renamed {
    pub use resilience_runtime as rt;
}

#[downgrade(crate = "renamed::rt", default)]
fn renamed_crate() -> u32 {
    4
}

fn never() -> ! {
    std::process::exit(0)
}

#[downgrade(fallback = never)]
fn diverges() -> ! {
    std::process::exit(0)
}

fn main() {
    assert_eq!(kept(), 1);
    assert_eq!(stacked(), 3);
    assert_eq!(renamed_crate(), 4);
    if std::env::var_os("NEVER_SET_IN_TESTS_4f2").is_some() {
        diverges();
    }
}
