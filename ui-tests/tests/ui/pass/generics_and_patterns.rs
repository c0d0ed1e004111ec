use resilience_runtime::downgrade;
use std::fmt::Display;

#[downgrade(default)]
fn generic<T: Default + Clone, const N: usize>(items: [T; N]) -> Vec<T> {
    items.to_vec()
}

fn tuple_fb(pair: (u32, u32), _ignored: u8) -> u32 {
    pair.0
}

#[downgrade(fallback = tuple_fb)]
fn tuple((a, b): (u32, u32), _: u8) -> u32 {
    a + b
}

struct P {
    x: i32,
    y: i32,
}

#[downgrade(default)]
fn struct_pattern(P { x, y }: P, mut z: i32) -> i32 {
    z += 1;
    x + y + z
}

// With `-> impl Trait` both paths must produce the same concrete type.
fn display_fb(_x: impl Display) -> String {
    "fallback".to_owned()
}

#[downgrade(fallback = display_fb)]
fn impl_trait(x: impl Display) -> impl Display {
    format!("<{x}>")
}

#[downgrade(default)]
fn lifetimes<'a>(s: &'a str, _t: &str) -> &'a str {
    s
}

fn main() {
    assert_eq!(generic([1, 2]), vec![1, 2]);
    assert_eq!(tuple((1, 2), 0), 3);
    assert_eq!(struct_pattern(P { x: 1, y: 2 }, 0), 4);
    assert_eq!(impl_trait(1).to_string(), "<1>");
    assert_eq!(lifetimes("a", "b"), "a");
}
