// Fallbacks the macro calls directly rather than through a function pointer: an
// async method (its future borrows `self`), an `impl Trait` parameter and a return
// type that holds a lifetime. A wrong parameter is reported at `fallback = ...`,
// naming the fallback's parameter, never as a rewrite of the function's own.
use resilience_runtime::downgrade;

struct Store;

impl Store {
    async fn cached(&self, _id: u32) -> Option<u32> {
        None
    }

    #[downgrade(point = "ui.direct.async", fallback = Self::cached)]
    async fn get(&self, id: u64) -> Option<u32> {
        Some(id as u32)
    }
}

fn show_cached(_value: impl std::fmt::Debug, _extra: u8) -> String {
    String::new()
}

#[downgrade(point = "ui.direct.impl", fallback = show_cached)]
fn show(value: impl std::fmt::Debug, extra: u16) -> String {
    format!("{value:?} {extra}")
}

fn first_cached(_text: &str, _at: u8) -> &str {
    ""
}

#[downgrade(point = "ui.direct.lifetime", fallback = first_cached)]
fn first(text: &str, at: usize) -> &str {
    &text[..at]
}

fn main() {}
