//! Compile-time behaviour of `#[downgrade]`: every supported shape compiles and runs,
//! every misuse is a compile error pointing at the offending tokens.

// With the runtime's `tokio` feature (this crate's default), as `timeout = "..."` needs.
#[cfg(feature = "tokio")]
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/pass/*.rs");
    // The messages are checked without the runtime's `tracing` feature: with it an
    // async call runs in a block of its own, and one message (an argument moved by
    // the body of a `timeout` fn with a fallback) names the value less exactly. The
    // README's test command runs both: `--all-features`, then the default features.
    #[cfg(not(feature = "tracing"))]
    t.compile_fail("tests/ui/fail/*.rs");
}

// Without it (`cargo test -p ui-tests --no-default-features`): `timeout` asks for it.
#[cfg(not(feature = "tokio"))]
#[test]
fn ui_without_tokio() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/no-tokio/*.rs");
}
