//! Declared points: every `#[downgrade]` and `#[breaker]` function of the program,
//! known at link time, before any of them is called.
//!
//! Each annotated function carries one static [`DeclaredPoint`] that the linker gathers
//! into a single list (a `linkme` distributed slice), so a policy file can be checked
//! against the points the binary really has, and an operator can list them, without
//! running any code path first.
//!
//! # Examples
//!
//! ```
//! use resilience_runtime::{downgrade, registry, Downgraded};
//!
//! #[downgrade(point = "docs.declared.lookup", default)]
//! fn lookup(id: u64) -> u64 {
//!     id
//! }
//!
//! // Listed although `lookup` has never been called.
//! let points = registry().declared_points();
//! let p = points.iter().find(|p| p.name() == "docs.declared.lookup").unwrap();
//! assert!(p.function().ends_with("::lookup"));
//! assert!(p.has_fallback());
//! assert!(registry().get("docs.declared.lookup").is_none());
//! # let _ = lookup;
//! ```

use linkme::distributed_slice;
use std::fmt;

/// Which attribute declared a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum MacroKind {
    /// `#[downgrade]`.
    Downgrade,
    /// `#[breaker]`.
    Breaker,
}

impl MacroKind {
    /// The attribute's name: `"downgrade"` or `"breaker"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            MacroKind::Downgrade => "downgrade",
            MacroKind::Breaker => "breaker",
        }
    }
}

impl fmt::Display for MacroKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One annotated function, as recorded at compile time.
///
/// A function with both `#[downgrade]` and `#[breaker]` is declared twice, once per
/// attribute; two functions sharing a point name are declared once each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeclaredPoint {
    name: &'static str,
    function: &'static str,
    file: &'static str,
    line: u32,
    kind: MacroKind,
    has_fallback: bool,
}

impl DeclaredPoint {
    /// Used by `#[downgrade]`'s expansion; not a public API.
    #[doc(hidden)]
    pub const fn downgrade(
        name: &'static str,
        function: &'static str,
        file: &'static str,
        line: u32,
        has_fallback: bool,
    ) -> DeclaredPoint {
        DeclaredPoint {
            name,
            function,
            file,
            line,
            kind: MacroKind::Downgrade,
            has_fallback,
        }
    }

    /// Used by `#[breaker]`'s expansion; not a public API.
    #[doc(hidden)]
    pub const fn breaker(
        name: &'static str,
        function: &'static str,
        file: &'static str,
        line: u32,
        has_fallback: bool,
    ) -> DeclaredPoint {
        DeclaredPoint {
            kind: MacroKind::Breaker,
            ..DeclaredPoint::downgrade(name, function, file, line, has_fallback)
        }
    }

    /// The point's name: the attribute's `point = "..."`, or the default
    /// `module::path::fn_name`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The function's path, `module::path::fn_name` (for a method, the module of the
    /// `impl`, without the type's name, which an attribute cannot see).
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The source file of the function, as `file!()` gives it.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The line of the function's name.
    pub fn line(&self) -> u32 {
        self.line
    }

    /// Which attribute declared the point.
    pub fn kind(&self) -> MacroKind {
        self.kind
    }

    /// Whether a downgraded call returns a `fallback` or `default` value (otherwise it
    /// returns an `Err` built from [`Downgraded`](crate::Downgraded)).
    pub fn has_fallback(&self) -> bool {
        self.has_fallback
    }
}

/// `name (#[kind] function at file:line, with fallback)`, or `..., no fallback)`
/// when a downgraded call returns an `Err` (see [`DeclaredPoint::has_fallback`]).
///
/// # Examples
///
/// ```
/// use resilience_runtime::{downgrade, registry};
///
/// #[downgrade(point = "docs.declared.display", default)]
/// fn answer() -> u32 {
///     42
/// }
///
/// let points = registry().declared_points();
/// let p = points.iter().find(|p| p.name() == "docs.declared.display").unwrap();
/// let shown = p.to_string();
/// assert!(shown.starts_with("docs.declared.display (#[downgrade] "), "{shown}");
/// assert!(shown.ends_with(", with fallback)"), "{shown}");
/// # let _ = answer;
/// ```
impl fmt::Display for DeclaredPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (#[{}] {} at {}:{}, {})",
            self.name,
            self.kind,
            self.function,
            self.file,
            self.line,
            if self.has_fallback {
                "with fallback"
            } else {
                "no fallback"
            }
        )
    }
}

/// Every declared point of the program, gathered by the linker.
///
/// Generated code adds to it through `__private`; nothing else should.
#[distributed_slice]
#[doc(hidden)]
pub static DECLARED_POINTS: [DeclaredPoint];

/// Every declared point of the program, in link order (see
/// [`Registry::declared_points`](crate::Registry::declared_points) for a sorted copy).
pub fn all() -> &'static [DeclaredPoint] {
    &DECLARED_POINTS
}

/// Whether some annotated function declares this point name.
pub fn is_declared(name: &str) -> bool {
    DECLARED_POINTS.iter().any(|p| p.name == name)
}

/// Every declaration linked into the program, sorted by point name, then function,
/// file and line (see [`Registry::declared_points`](crate::Registry::declared_points)).
pub(crate) fn sorted() -> Vec<DeclaredPoint> {
    let mut points = DECLARED_POINTS.to_vec();
    points.sort_unstable_by(|a, b| {
        (a.name, a.function, a.file, a.line, a.kind)
            .cmp(&(b.name, b.function, b.file, b.line, b.kind))
    });
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_everything() {
        let p = DeclaredPoint::breaker("a.b", "m::f", "src/m.rs", 7, false);
        assert_eq!(p.kind(), MacroKind::Breaker);
        assert_eq!(
            p.to_string(),
            "a.b (#[breaker] m::f at src/m.rs:7, no fallback)"
        );
        let p = DeclaredPoint::downgrade("c.d", "m::g", "src/m.rs", 9, true);
        assert_eq!(p.kind(), MacroKind::Downgrade);
        assert_eq!(
            p.to_string(),
            "c.d (#[downgrade] m::g at src/m.rs:9, with fallback)"
        );
    }
}
