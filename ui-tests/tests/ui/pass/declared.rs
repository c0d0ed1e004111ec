// Every annotated fn registers itself at link time, whatever its shape: stacked
// attributes, `#[breaker]`, a renamed runtime path, a trait's default method, a
// generic async fn. None is called before the list is checked.
#![allow(dead_code)]

use resilience_runtime::declared::MacroKind;
use resilience_runtime::{breaker, downgrade, registry};

mod renamed {
    pub use resilience_runtime as rt;
}

#[downgrade(point = "ui.stacked", default)]
#[breaker(point = "ui.stacked", default)]
fn stacked() -> u8 {
    1
}

#[breaker(default)]
fn breaker_only() -> u8 {
    2
}

#[downgrade(crate = "renamed::rt", point = "ui.renamed", default)]
fn renamed_path() -> u8 {
    3
}

trait Service {
    #[downgrade(point = "ui.trait.default", default)]
    fn call(&self) -> u8 {
        4
    }
}

#[downgrade(point = "ui.generic.async", default)]
async fn generic_async<T: Default + Send>(t: T) -> T {
    let _ = t;
    T::default()
}

fn main() {
    let points = registry().declared_points();
    let find = |name: &str, kind: MacroKind| {
        points
            .iter()
            .filter(|p| p.name() == name && p.kind() == kind)
            .count()
    };
    assert_eq!(find("ui.stacked", MacroKind::Downgrade), 1);
    assert_eq!(find("ui.stacked", MacroKind::Breaker), 1);
    // The default name is the fn's path (trybuild names the crate).
    let default_name = concat!(module_path!(), "::breaker_only");
    assert_eq!(find(default_name, MacroKind::Breaker), 1);
    assert_eq!(find("ui.renamed", MacroKind::Downgrade), 1);
    assert_eq!(find("ui.trait.default", MacroKind::Downgrade), 1);
    assert_eq!(find("ui.generic.async", MacroKind::Downgrade), 1);
    assert!(registry().point_names().is_empty(), "nothing was called");
    assert_eq!(stacked(), 1);
    assert_eq!(registry().declared_points(), points);
}
