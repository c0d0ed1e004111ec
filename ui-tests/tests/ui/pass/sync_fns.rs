use resilience_runtime::{downgrade, Downgraded};

#[derive(Debug)]
struct MyError;
impl From<Downgraded> for MyError {
    fn from(_: Downgraded) -> Self {
        MyError
    }
}

#[downgrade(point = "pass.result")]
fn result_fn(x: u32) -> Result<u32, MyError> {
    let y = x.checked_add(1).ok_or(MyError)?;
    Ok(y)
}

fn fb(x: u32) -> u32 {
    x
}

#[downgrade(point = "pass.fallback", fallback = fb)]
fn with_fallback(x: u32) -> u32 {
    if x > 10 {
        return 10;
    }
    x + 1
}

#[downgrade(default)]
fn unit_return() {}

#[downgrade(point = "pass.default_expr", default = String::from("x"))]
fn default_expr() -> String {
    String::new()
}

#[downgrade(default)]
unsafe fn unsafe_fn(p: *const u8) -> u8 {
    unsafe { *p }
}

fn main() {
    assert_eq!(result_fn(1).unwrap(), 2);
    assert_eq!(with_fallback(20), 10);
    unit_return();
    assert_eq!(default_expr(), "");
    let b = 5u8;
    assert_eq!(unsafe { unsafe_fn(&b) }, 5);
}
