use resilience_runtime::downgrade;

#[downgrade(point = "", default)]
fn f() -> u32 {
    1
}

#[downgrade(point = "   ", default)]
fn g() -> u32 {
    1
}

fn main() {}

#[downgrade(point = "tab\there", default)]
fn h() -> u32 {
    1
}

#[downgrade(point = " padded", default)]
fn i() -> u32 {
    1
}

#[downgrade(point = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", default)]
fn j() -> u32 {
    1
}
