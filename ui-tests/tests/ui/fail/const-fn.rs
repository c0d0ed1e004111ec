use resilience_runtime::downgrade;

#[downgrade(default)]
const fn f() -> u32 {
    1
}

fn main() {}
