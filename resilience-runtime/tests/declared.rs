//! `Registry::declared_points` lists every annotated function of the binary before any
//! of them has been called: free fns, methods, generic fns, async fns, in several
//! modules. Nothing here calls an annotated function until the last test, which checks
//! that a call does not change the list.

// Most annotated functions here are never called: that is what is tested.
#![allow(dead_code)]

use resilience_runtime::declared::{DeclaredPoint, MacroKind};
use resilience_runtime::{downgrade, registry, Downgraded};

#[derive(Debug)]
struct Error(Downgraded);

impl From<Downgraded> for Error {
    fn from(d: Downgraded) -> Self {
        Error(d)
    }
}

/// The line of the first line of this file that contains `needle` (1-based).
fn line_of(needle: &str) -> u32 {
    let source = include_str!("declared.rs");
    let index = source
        .lines()
        .position(|l| l.contains(needle) && !l.contains("line_of("))
        .unwrap_or_else(|| panic!("`{needle}` not found in declared.rs"));
    u32::try_from(index + 1).unwrap()
}

mod orders {
    use super::Error;
    use resilience_runtime::downgrade;

    #[downgrade(point = "declared.orders.create", default)]
    pub(crate) fn create(id: u64) -> u64 {
        id
    }

    // Default name: the module path and the fn name.
    #[downgrade]
    pub(crate) fn cancel(id: u64) -> Result<u64, Error> {
        Ok(id)
    }

    pub(crate) mod nested {
        use super::Error;
        use resilience_runtime::downgrade;

        #[downgrade(point = "declared.orders.nested.async", fallback = fallback)]
        pub(crate) async fn fetch(id: u64) -> Result<u64, Error> {
            Ok(id)
        }

        async fn fallback(id: u64) -> Result<u64, Error> {
            Ok(id + 1)
        }
    }
}

mod catalog {
    use super::Error;
    use resilience_runtime::downgrade;

    pub(crate) struct Catalog {
        pub(crate) base: u64,
    }

    impl Catalog {
        #[downgrade(point = "declared.catalog.price")]
        pub(crate) fn price(&self, sku: u64) -> Result<u64, Error> {
            Ok(self.base + sku)
        }

        // A generic method with a where clause and the default name.
        #[downgrade(default)]
        pub(crate) fn first<T>(&self, items: &[T]) -> T
        where
            T: Clone + Default + Send,
        {
            items.first().cloned().unwrap_or_default()
        }
    }

    // A generic free fn that is never instantiated anywhere in this binary.
    #[downgrade(point = "declared.catalog.generic", default = Vec::new())]
    pub(crate) fn repeat<T: Clone>(item: T, n: usize) -> Vec<T> {
        vec![item; n]
    }

    pub(crate) trait Pricing {
        fn quote(&self) -> Result<u64, Error>;
    }

    impl Pricing for Catalog {
        #[downgrade(point = "declared.catalog.quote")]
        fn quote(&self) -> Result<u64, Error> {
            Ok(self.base)
        }
    }
}

/// The declarations of this test binary: everything whose function path is in this crate.
fn ours() -> Vec<DeclaredPoint> {
    registry()
        .declared_points()
        .into_iter()
        .filter(|p| p.function().starts_with("declared::"))
        .collect()
}

/// The only points that a test calls.
const CALLED: [&str; 2] = ["declared.top.level", "declared::catalog::first"];

#[test]
fn every_annotated_function_is_listed_before_any_call() {
    let got: Vec<(&str, &str, bool)> = ours()
        .iter()
        .map(|p| (p.name(), p.function(), p.has_fallback()))
        .collect();
    let expected = [
        (
            "declared.catalog.generic",
            "declared::catalog::repeat",
            true,
        ),
        ("declared.catalog.price", "declared::catalog::price", false),
        ("declared.catalog.quote", "declared::catalog::quote", false),
        ("declared.orders.create", "declared::orders::create", true),
        (
            "declared.orders.nested.async",
            "declared::orders::nested::fetch",
            true,
        ),
        ("declared.top.level", "declared::top_level", true),
        ("declared::catalog::first", "declared::catalog::first", true),
        (
            "declared::orders::cancel",
            "declared::orders::cancel",
            false,
        ),
    ];
    assert_eq!(got, expected);
    // Declared does not mean created: no point exists until something touches it
    // (`calls_do_not_change_the_declarations` may be calling the other two right now).
    for (name, _, _) in expected
        .into_iter()
        .filter(|(name, _, _)| !CALLED.contains(name))
    {
        assert!(
            registry().get(name).is_none(),
            "{name} was created before any call"
        );
    }
    assert!(ours().iter().all(|p| p.kind() == MacroKind::Downgrade));
}

#[test]
fn file_and_line_point_at_the_function_name() {
    let points = ours();
    let find = |name: &str| {
        *points
            .iter()
            .find(|p| p.name() == name)
            .unwrap_or_else(|| panic!("{name} not declared"))
    };
    for (name, needle) in [
        ("declared.orders.create", "pub(crate) fn create(id: u64)"),
        ("declared::orders::cancel", "pub(crate) fn cancel(id: u64)"),
        ("declared.orders.nested.async", "pub(crate) async fn fetch("),
        ("declared.catalog.price", "pub(crate) fn price(&self"),
        ("declared::catalog::first", "pub(crate) fn first<T>"),
        ("declared.catalog.generic", "pub(crate) fn repeat<T"),
        (
            "declared.catalog.quote",
            "fn quote(&self) -> Result<u64, Error> {",
        ),
    ] {
        let p = find(name);
        assert_eq!(p.file(), "resilience-runtime/tests/declared.rs", "{p}");
        assert_eq!(p.line(), line_of(needle), "{p}");
    }
}

#[test]
fn is_declared_matches_the_list() {
    assert!(resilience_runtime::declared::is_declared(
        "declared.catalog.quote"
    ));
    assert!(!resilience_runtime::declared::is_declared(
        "declared.not.annotated"
    ));
    assert_eq!(
        resilience_runtime::declared::all().len(),
        registry().declared_points().len()
    );
}

#[test]
fn calls_do_not_change_the_declarations() {
    let before = registry().declared_points();
    assert_eq!(top_level(), 1);
    assert!(registry().get("declared.top.level").is_some());
    let catalog = catalog::Catalog { base: 10 };
    assert_eq!(catalog.first(&[5u8, 6]), 5);
    assert_eq!(registry().declared_points(), before);
}

// A fn annotated here, at the top level of the test crate, after everything else.
#[downgrade(point = "declared.top.level", default)]
fn top_level() -> u8 {
    1
}

#[test]
fn top_level_fn_is_declared_too() {
    let p = registry()
        .declared_points()
        .into_iter()
        .find(|p| p.name() == "declared.top.level")
        .expect("declared.top.level");
    assert_eq!(p.function(), "declared::top_level");
    assert_eq!(p.line(), line_of("fn top_level() -> u8"));
}

/// A registry full of undeclared points still takes every declared one.
#[test]
fn declared_points_are_never_refused_by_the_cap() {
    use resilience_runtime::{Clock, Registry};
    let reg: &'static Registry = Box::leak(Box::new(Registry::with_clock(Clock::system())));
    reg.set_max_undeclared_points(1);
    reg.point("made.up.1").unwrap();
    assert!(reg.point("made.up.2").is_err());
    for name in ["declared.orders.create", "declared.catalog.price"] {
        assert_eq!(reg.point(name).unwrap().name(), name);
    }
    assert_eq!(reg.undeclared_points(), 1);
    // A policy file naming a new undeclared point is refused as a whole, naming it.
    #[cfg(feature = "config")]
    {
        let err = reg
            .load_policies_str(
                "[points.\"made.up.3\"]\nmax_visits = 1\n[points.\"declared.orders.create\"]\nmax_visits = 2\n",
                resilience_runtime::config::Format::Toml,
            )
            .unwrap_err();
        assert!(err.to_string().contains("made.up.3"), "{err}");
        assert_eq!(reg.policy("declared.orders.create").unwrap(), None);
    }
}
